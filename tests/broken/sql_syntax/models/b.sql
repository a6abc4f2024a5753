select 1 as a, 2 as b
