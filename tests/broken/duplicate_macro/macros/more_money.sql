-- a second definition used to be reported without a line

{% macro cents(column) -%}
  cast({{ column }} * 100 as bigint)
{%- endmacro %}
