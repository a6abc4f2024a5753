-- a typo in config()
{{ config(materialized='table', partiton_by='x') }}
select 1 as x
