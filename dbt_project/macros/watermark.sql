{#
  High-water marks of incremental models in staging.sync_watermark (sync role only).
  The upper bound is fixed when the model renders and stored as `pending`; the post-hook
  promotes it only after the model succeeded, so rows changed mid-run are picked up next time.
  A build into the build schemas (EVALPKG_DBT_BUILD_SUFFIX set) promotes it to `built` only:
  `evalpkg sync` makes that the high-water mark in the transaction that publishes the build.
#}

{% macro watermark_bounds(model_name, source_relation) %}
    {% set bounds = {'low': none, 'high': '9999-12-31'} %}
    {% if execute %}
        {% set high = run_query("select coalesce(max(update_time), '1900-01-01')::text from " ~ source_relation).columns[0].values()[0] %}
        {% do bounds.update({'high': high}) %}
        {% do run_query(
            "insert into staging.sync_watermark (model, pending) values ('" ~ model_name ~ "', '" ~ high ~ "') "
            ~ "on conflict (model) do update set pending = excluded.pending") %}
        {% if is_incremental() %}
            {% set low = run_query("select high_water::text from staging.sync_watermark where model = '" ~ model_name ~ "'").columns[0].values()[0] %}
            {% do bounds.update({'low': low}) %}
        {% endif %}
    {% endif %}
    {{ return(bounds) }}
{% endmacro %}

{% macro promote_watermark(model_name) %}
    {%- set column = 'built' if env_var('EVALPKG_DBT_BUILD_SUFFIX', '') else 'high_water' -%}
    update staging.sync_watermark set {{ column }} = pending where model = '{{ model_name }}'
{% endmacro %}

{#
  An incremental model is rebuilt in full when the snapshot changed under it since its last build: its
  "now" moved (a report released after it is still pending: rows that did not change in prod change in
  the eval DB), or production was generated anew (`prod generate` replaces every row, with update times
  the watermark may already have passed). Each is kept as a watermark row of its own, '<model>@now' and
  '<model>@generated', promoted with the model's.
#}
{% macro snapshot_changed(model_name) %}
    {% set changed = {'value': false} %}
    {% if execute %}
        {% set marks = {
            '@now': snapshot_now(),
            '@generated': '(select generated_at from ' ~ source('meta', 'his_info') ~ ')',
        } %}
        {% for suffix, expression in marks.items() %}
            {% set value = run_query("select " ~ expression ~ "::text").columns[0].values()[0] %}
            {% set key = model_name ~ suffix %}
            {% set before = run_query("select high_water::text from staging.sync_watermark where model = '" ~ key ~ "'").columns[0].values() %}
            {% if not before or before[0] != value %}
                {% do changed.update({'value': true}) %}
            {% endif %}
            {% do run_query(
                "insert into staging.sync_watermark (model, pending) values ('" ~ key ~ "', '" ~ value ~ "') "
                ~ "on conflict (model) do update set pending = excluded.pending") %}
        {% endfor %}
    {% endif %}
    {{ return(changed.value) }}
{% endmacro %}
