select
  1 as x
where kind = '{{ var("price_kindd") }}'
