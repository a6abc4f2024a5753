select
  1 as x
where kind = 'retail
