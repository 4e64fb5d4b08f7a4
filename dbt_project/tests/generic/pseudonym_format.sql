{% test pseudonym_format(model, column_name, prefix) %}
select {{ column_name }} from {{ model }}
where {{ column_name }} is null or {{ column_name }} !~ '^{{ prefix }}[0-9a-f]{20}$'
{% endtest %}
