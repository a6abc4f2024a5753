{{ config(materialized='numerator', key=['shop_id', 'offer_id', 'warehouse_id'], shards=4, ttl_generations=3) }}
-- The search index's persistent <shard_id, doc_id> of every active offer (seed 001's numerator):
-- an offer keeps its ids while it stays active; ids of offers gone for more than 3 generations
-- go to new offers, and the state is compacted when half its ids are held by gone offers.
SELECT
  o.shop_id,
  o.offer_id,
  s.warehouse_id
FROM {{ source('stage', 'offers') }} AS o
JOIN {{ source('stage', 'shops') }} AS s
  ON s.shop_id = o.shop_id AND s.is_deleted = FALSE
WHERE o.is_deleted = FALSE AND o.status = 'active'
