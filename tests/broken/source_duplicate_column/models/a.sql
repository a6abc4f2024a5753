select s.shop_id from {{ source('stage', 'shops') }} as s
