{% macro cents(column) %}round({{ column }} * 100){% endmacro %}
