{{ config(materialized='view') }}
select
  a b c,
  b
from {{ ref('b') }}
