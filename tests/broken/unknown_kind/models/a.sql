
{{ config(materialized='snapshots') }}
select 1 as x
