{{ config(materialized='table',
          tags=5) }}
select 1 as x
