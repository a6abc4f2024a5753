-- A singular test: the rows it returns are failures. Every enriched order has a positive
-- quantity and an amount that is a whole multiple of it (amount = unit price × quantity).
SELECT order_id, quantity, amount
FROM {{ ref('orders_enriched') }}
WHERE quantity <= 0 OR amount < 0 OR amount * 100 % quantity <> 0
