{{ config(schema="marts-2") }}
select 1 as x
