select o.id from {{ source('stage', 'offers') }} as o
