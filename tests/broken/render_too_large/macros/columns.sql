{% macro many_columns(n) %}
  {%- for i in range(n) %}
    {%- for j in range(n) %}c_{{ i }}_{{ j }}, {% endfor %}
  {%- endfor %}
{%- endmacro %}
