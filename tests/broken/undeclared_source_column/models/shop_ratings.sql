-- a typo in a declared source's column: caught by compile, not 24 s into a run
select s.shop_id,
       s.ratng
from {{ source('stage', 'shops') }} as s
