
{{ config(materialized='snapshot') }}
select 1 as x
