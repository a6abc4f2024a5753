select 2 as shop_id
