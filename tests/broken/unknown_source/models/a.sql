select o.offer_id
from
  {{ source('stage', 'offer') }} as o
