{#
  The eval DB keeps production's keys: each emr model's `meta` names its primary key and the
  columns agents and golds look rows up by (patient_id, visit_id, the time columns questions filter
  on), e.g. meta: {primary_key: [visit_id], indexes: [[patient_id], [ryrq]]}. A post-hook builds
  what is missing (an incremental model's build table already has them, copied from the published
  one); the generic test `keys_built` fails when any is missing.
#}

{# Every index of `relation` as 'col1,col2' -> true when it is the primary key. #}
{% macro existing_indexes(relation) %}
    {% set found = {} %}
    {% if execute %}
        {% set rows = run_query(
            "select string_agg(a.attname, ',' order by k.ord), i.indisprimary"
            ~ " from pg_index i cross join unnest(i.indkey) with ordinality as k(attnum, ord)"
            ~ " join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum"
            ~ " where i.indrelid = '" ~ relation ~ "'::regclass group by i.indexrelid, i.indisprimary") %}
        {% for row in rows %}
            {% do found.update({row[0]: found.get(row[0], false) or row[1]}) %}
        {% endfor %}
    {% endif %}
    {{ return(found) }}
{% endmacro %}

{# What `meta` asks for: [(columns, is_primary)], the primary key first. #}
{% macro declared_keys(meta) %}
    {% set keys = [] %}
    {% if meta.get('primary_key') %}
        {% do keys.append((meta['primary_key'] | join(','), true)) %}
    {% endif %}
    {% for columns in meta.get('indexes', []) %}
        {% do keys.append((columns | join(','), false)) %}
    {% endfor %}
    {{ return(keys) }}
{% endmacro %}

{% macro build_keys() %}
    {%- set existing = existing_indexes(this) -%}
    {%- for columns, primary in declared_keys(model.config.meta) -%}
        {%- if primary and not existing.get(columns) -%}
            alter table {{ this }} add primary key ({{ columns }});
        {%- elif not primary and columns not in existing -%}
            create index on {{ this }} ({{ columns }});
        {%- endif %}
    {% endfor -%}
{% endmacro %}
