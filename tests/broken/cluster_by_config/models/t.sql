{{ config(materialized='table', table_format='delta') }}
{{ config(cluster_by=3) }}
select 1 as x
