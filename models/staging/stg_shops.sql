-- Live shops with their warehouse.
SELECT
  s.shop_id,
  s.name AS shop_name,
  s.warehouse_id,
  s.rating
FROM {{ source('stage', 'shops') }} AS s
WHERE {{ live('s') }}
