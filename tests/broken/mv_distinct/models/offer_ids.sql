{{ config(materialized='mv') }}
-- every offer once
SELECT DISTINCT o.offer_id
FROM {{ source('stage', 'offers') }} AS o
