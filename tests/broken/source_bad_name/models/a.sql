select e.id from {{ source('stage', 'events') }} as e
