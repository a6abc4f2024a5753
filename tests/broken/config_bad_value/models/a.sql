{{ config(materialized='fact',
          maxstep='lots') }}
select 1 as x
