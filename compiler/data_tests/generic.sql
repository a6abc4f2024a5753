{#- The built-in generic tests. Each returns the rows that break the expectation; a project's
    {% test name(model, column_name, ...) %} blocks define more the same way (and may replace these). -#}

{% test unique(model, column_name) %}
-- each value that occurs more than once: one row per duplicated value
SELECT {{ column_name }} AS unique_field, count(*) AS n_records
FROM {{ model }}
WHERE {{ column_name }} IS NOT NULL
GROUP BY {{ column_name }}
HAVING count(*) > 1
{% endtest %}

{% test not_null(model, column_name) %}
SELECT {{ '*' if should_store_failures() else column_name }}
FROM {{ model }}
WHERE {{ column_name }} IS NULL
{% endtest %}

{% test accepted_values(model, column_name, values, quote=True) %}
-- each value outside the list: one row per distinct value, with its number of rows
SELECT {{ column_name }} AS value_field, count(*) AS n_records
FROM {{ model }}
GROUP BY {{ column_name }}
HAVING {{ column_name }} NOT IN (
  {%- for value in values %}{{ "'" ~ value ~ "'" if quote else value }}{{ ", " if not loop.last }}{% endfor -%}
)
{% endtest %}

{% test relationships(model, column_name, to, field) %}
-- each row whose value has no match in {{ to }}.{{ field }}
SELECT child.from_field
FROM (SELECT {{ column_name }} AS from_field FROM {{ model }} WHERE {{ column_name }} IS NOT NULL) AS child
LEFT JOIN (SELECT {{ field }} AS to_field FROM {{ to }}) AS parent ON child.from_field = parent.to_field
WHERE parent.to_field IS NULL
{% endtest %}
