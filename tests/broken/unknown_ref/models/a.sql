select s.shop_id
from {{ ref('stg_shop') }} as s
