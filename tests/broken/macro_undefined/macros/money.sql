{% macro money(expr) -%}
  CAST(ROUND({{ expr }}, {{ precision }}) AS DECIMAL(12, 2))
{%- endmacro %}
