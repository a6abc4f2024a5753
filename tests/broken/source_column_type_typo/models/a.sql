select s.rating from {{ source('stage', 'shops') }} as s
