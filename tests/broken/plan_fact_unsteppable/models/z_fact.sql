{{ config(materialized='fact') }}
select c.category_id from {{ ref('a_categories') }} as c
