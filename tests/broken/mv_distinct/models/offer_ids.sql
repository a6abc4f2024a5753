{{ config(materialized='mv', unique_key=['kind', 'id']) }}
-- every offer once, then every offer again as a listing
SELECT DISTINCT 'offer' AS kind, o.offer_id AS id
FROM {{ source('stage', 'offers') }} AS o
UNION ALL
SELECT 'listing' AS kind, l.offer_id AS id
FROM {{ source('stage', 'offers') }} AS l
