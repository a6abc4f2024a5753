{{ config(materialized='mv') }}
-- Live offers per category and country, refreshed by group. It reads offers_wide, an mv whose
-- batches publish the offers they replaced: a changed offer, price, shop, warehouse or region
-- recomputes only the groups its offers were in or are in now.
SELECT
  w.category_name,
  w.country,
  COUNT(*) AS offers,
  COUNT(DISTINCT w.shop_id) AS shops,
  {{ money('AVG(w.' ~ var('price_kind') ~ '_price)') }} AS avg_price,
  MIN(w.{{ var('price_kind') }}_price) AS min_price
FROM {{ ref('offers_wide') }} AS w
GROUP BY w.category_name, w.country
