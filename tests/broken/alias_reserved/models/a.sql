{{ config(materialized='table',
          alias='from') }}
select 1 as x
