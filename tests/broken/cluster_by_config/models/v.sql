{{ config(materialized='view', cluster_by='x') }}
select 1 as x
