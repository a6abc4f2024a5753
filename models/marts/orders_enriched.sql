{{ config(materialized='fact', maxstep=50000, depends_on=['offers_wide']) }}
-- Orders with the offer's shop, category and region at the time of the step.
SELECT
  o.order_id,
  o.ts,
  o.offer_id,
  o.quantity,
  o.amount,
  w.shop_name,
  w.category_name,
  w.region_name
FROM {{ ref('stg_orders') }} AS o
LEFT JOIN {{ ref('offers_wide') }} AS w
  ON w.offer_id = o.offer_id
