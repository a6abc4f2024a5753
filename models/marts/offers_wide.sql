{{ config(materialized='mv',
          publish=({'to': 'app', 'indexes': [['country', 'retail_price'], ['shop_id'], ['category_name'],
                                             ['retail_price'], ['base_price'], ['shop_rating']]}
                   if env_var('MVFLOW_PUBLISH', '') == '1' else none)) }}
-- One wide row per active offer: everything a search page filters on. With MVFLOW_PUBLISH=1 it is
-- also published by key to PostgreSQL for the search page itself (docs/publishing.md).
SELECT
  o.offer_id,
  o.shop_id,
  o.title,
  o.base_price,
  s.name AS shop_name,
  s.rating AS shop_rating,
  w.name AS warehouse_name,
  r.name AS region_name,
  r.country,
  c.name AS category_name,
  p.price AS {{ var('price_kind') }}_price,
  p.currency
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
