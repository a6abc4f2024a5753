-- the old name, kept for dashboards
{{ config(alias='stg_shops') }}
select 1 as shop_id
