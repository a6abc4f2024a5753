select
  {{ money('p.price') }} as price
from {{ ref('b') }} as p
