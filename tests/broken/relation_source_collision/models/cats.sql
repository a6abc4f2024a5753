{{ config(schema='stage',
          alias='Categories') }}
select category_id from {{ source('stage', 'categories') }}
