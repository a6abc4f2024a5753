{{ config(materialized='mv', table_format='delta') }}
{{ config(cluster_by=['shop_id', 'titel']) }}
select o.id, o.shop_id, o.title
from {{ source('stage', 'offers') }} as o
