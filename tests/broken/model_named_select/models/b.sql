-- the error is at the model named select, not here
select s.x
from {{ ref('select') }} as s
