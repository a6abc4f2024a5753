{{ config(materialized='mv') }}
-- Live offers per category and country, refreshed by group: a changed offer, price, shop,
-- warehouse or region recomputes only the groups its offers were in or are in now.
SELECT
  c.name AS category_name,
  r.country,
  COUNT(*) AS offers,
  COUNT(DISTINCT o.shop_id) AS shops,
  {{ money('AVG(p.price)') }} AS avg_price,
  MIN(p.price) AS min_price
FROM {{ source('stage', 'offers') }} AS o
JOIN {{ source('stage', 'shops') }} AS s
  ON s.shop_id = o.shop_id AND s.is_deleted = FALSE
JOIN {{ source('stage', 'warehouses') }} AS w
  ON w.warehouse_id = s.warehouse_id
LEFT JOIN {{ source('stage', 'regions') }} AS r
  ON r.region_id = w.region_id
LEFT JOIN {{ source('stage', 'categories') }} AS c
  ON c.category_id = o.category_id
LEFT JOIN {{ source('stage', 'prices') }} AS p
  ON p.offer_id = o.offer_id AND p.price_kind = '{{ var("price_kind") }}'
WHERE o.is_deleted = FALSE AND o.status = 'active'
GROUP BY c.name, r.country
