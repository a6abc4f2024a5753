select 1.0 as price
