select 1 as shop_id
