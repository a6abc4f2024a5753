{{ config(materialized='table', table_format='delta', partition_by='x',
          cluster_by=['y']) }}
select 1 as x, 2 as y
