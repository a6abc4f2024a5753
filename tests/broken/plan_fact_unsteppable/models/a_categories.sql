select c.category_id from {{ source('stage', 'categories') }} as c
