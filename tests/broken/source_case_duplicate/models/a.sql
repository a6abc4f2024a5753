select r.region_id from {{ source('stage', 'regions') }} as r
