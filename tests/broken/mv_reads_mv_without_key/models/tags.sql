{{ config(materialized='mv') }}
SELECT o.id, t.text FROM {{ source('d', 'o') }} AS o
LEFT JOIN {{ source('d', 't') }} AS t ON t.offer_id = o.id
