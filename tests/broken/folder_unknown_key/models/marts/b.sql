select 2 as x
