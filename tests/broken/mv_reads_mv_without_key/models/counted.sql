{{ config(materialized='mv') }}
SELECT g.id, g.text
FROM {{ ref('tags') }} AS g
