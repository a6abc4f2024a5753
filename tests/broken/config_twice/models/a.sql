{{ config(materialized='table') }}
select 1 as x
-- a second config() used to override the first silently
{{ config(materialized='view') }}
