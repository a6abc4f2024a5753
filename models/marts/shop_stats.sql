{{ config(materialized='table', unique_key='shop_id',
          publish=({'to': 'app', 'indexes': [['offers']]} if env_var('MVFLOW_PUBLISH', '') == '1' else none)) }}
-- Offers and average price per shop, rebuilt in full when an input moved. With MVFLOW_PUBLISH=1 each
-- build is also published in full to PostgreSQL (docs/publishing.md).
SELECT
  s.shop_id,
  s.shop_name,
  COUNT(o.offer_id) AS offers,
  {{ money('AVG(o.base_price)') }} AS avg_price
FROM {{ ref('stg_shops') }} AS s
LEFT JOIN {{ source('stage', 'offers') }} AS o
  ON o.shop_id = s.shop_id AND {{ live('o') }}
GROUP BY s.shop_id, s.shop_name
