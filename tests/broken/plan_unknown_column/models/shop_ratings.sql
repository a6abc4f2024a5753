-- plan checks what compile checks: this unknown column is found by column lineage, which compile
-- derives for target/ (plan used to exit 0 here)
select s.shop_id,
       s.ratng
from {{ source('stage', 'shops') }} as s
