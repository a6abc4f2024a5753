{% macro live(alias) -%}
  NOT {{ alias }}.is_deleted
{%- endmacr %}
