select
  {{ many_columns(100000) }}
  1 as id
