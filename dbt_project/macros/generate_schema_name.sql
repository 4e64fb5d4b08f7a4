{# Use the configured schema name as is (emr, meta, ops, staging): agents see stable names.
   Marts build into <schema> + EVALPKG_DBT_BUILD_SUFFIX when it is set (`evalpkg sync` sets
   `__build`): agents keep querying the previous snapshot until the sync swaps the whole build in. #}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {%- set name = custom_schema_name | trim if custom_schema_name is not none else target.schema -%}
    {%- if node.resource_type == 'model' and node.fqn[1] == 'marts' -%}
        {{ name ~ env_var('EVALPKG_DBT_BUILD_SUFFIX', '') }}
    {%- else -%}
        {{ name }}
    {%- endif -%}
{%- endmacro %}
