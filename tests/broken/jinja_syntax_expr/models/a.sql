select
  1 as x,
  {{ 1 + }} as y
