{{ config(materialized='table') }}
{{ config(cluster_by='x') }}
select 1 as x
