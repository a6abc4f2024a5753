select 1 as x;
select 2 as y
