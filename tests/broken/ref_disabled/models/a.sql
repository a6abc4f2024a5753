{{ config(enabled=false) }}
select 1 as x
