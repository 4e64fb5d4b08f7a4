{# Every primary key and index the model's meta declares (macros/keys.sql) exists on the built table:
   one row per missing one. #}
{% test keys_built(model) %}
{% set missing = [] %}
{% if execute %}
{% set node = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model')
    | selectattr('alias', 'equalto', model.identifier) | first %}
{% set existing = existing_indexes(model) %}
{% for columns, primary in declared_keys(node.config.meta) %}
    {% set present = existing.get(columns, false) if primary else columns in existing %}
    {% if not present %}
        {% do missing.append(('primary key' if primary else 'index') ~ ' (' ~ columns ~ ')') %}
    {% endif %}
{% endfor %}
{% endif %}
{% if missing %}
    {% for what in missing %}select '{{ model.identifier }}' as table_name, '{{ what }}' as missing{{ ' union all ' if not loop.last }}{% endfor %}
{% else %}
    select null::text as table_name, null::text as missing where false
{% endif %}
{% endtest %}
