{{ config(materialized='fact',
          depends_on=['f2']) }}
select e.id, e.ts from {{ source('stage', 'events') }} as e
