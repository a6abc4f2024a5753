{{ config(materialized='table') }}
-- Offers and average price per shop, rebuilt in full on every run.
SELECT
  s.shop_id,
  s.shop_name,
  COUNT(o.offer_id) AS offers,
  {{ money('AVG(o.base_price)') }} AS avg_price
FROM {{ ref('stg_shops') }} AS s
LEFT JOIN {{ source('stage', 'offers') }} AS o
  ON o.shop_id = s.shop_id AND {{ live('o') }}
GROUP BY s.shop_id, s.shop_name
