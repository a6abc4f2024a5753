-- a model with a broken tag
select 1 as x
{% if true %}
where 1 = 1
