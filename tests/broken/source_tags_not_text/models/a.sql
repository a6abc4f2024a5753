select s.id from {{ source('stage', 'shops') }} as s
