{{ config(materialized='table', partition_by=['dt']) }}
select 1 as x,
       current_date() as day
