-- prices in éuros
select 1 as x
