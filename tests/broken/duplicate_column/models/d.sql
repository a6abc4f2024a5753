select
  a.x,
  b.x
from {{ ref("c") }} a cross join {{ ref("c") }} b
