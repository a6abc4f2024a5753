{{ config(materialized='fact') }}
{{ config(maxstep=0) }}
{{ config(delay='soon', partition_by=3) }}
{{ config(alias='daily orders', sise=10) }}
select 1 as x
