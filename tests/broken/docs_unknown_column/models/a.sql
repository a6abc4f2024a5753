select 1 as id, 2.5 as amount
