{{ config('table') }}
select 1 as x
