-- Orders that were not cancelled.
SELECT
  o.order_id,
  o.offer_id,
  o.quantity,
  {{ money('o.amount') }} AS amount,
  o.ts
FROM {{ source('stage', 'orders') }} AS o
WHERE o.status <> 'cancelled'
