{# Round a money amount to cents, keeping NULLs. #}
{% macro money(expr) -%}
  CAST(ROUND({{ expr }}, 2) AS DECIMAL(12, 2))
{%- endmacro %}

{# The standard filter for live rows of a soft-deleting source. #}
{% macro live(alias, flag='is_deleted') -%}
  NOT {{ alias }}.{{ flag }}
{%- endmacro %}
