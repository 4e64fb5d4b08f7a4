{#
  De-identification primitives. The HMAC key is read from a table only the sync role can
  select, so it never appears in compiled SQL, dbt vars or logs. Each purpose has its own
  domain prefix: a date offset derived from the pseudonym's own hash would let anyone who
  sees the pseudonym undo the shift.
#}

{% macro deid_key() -%}
    (select hmac_key from {{ source('deid_secret', 'hmac_key') }} limit 1)
{%- endmacro %}

{% macro keyed_hash(purpose, expr) -%}
    encode(hmac(convert_to('{{ purpose }}:' || ({{ expr }})::text, 'UTF8'), {{ deid_key() }}, 'sha256'), 'hex')
{%- endmacro %}

{# 'P' + 20 hex digits (80 bits): collision-free at benchmark scale, irreversible without the key. #}
{% macro pseudonym(purpose, prefix, expr) -%}
    ('{{ prefix }}' || left({{ keyed_hash(purpose, expr) }}, 20))
{%- endmacro %}

{# Whole weeks back (7..364 days): weekdays, intervals and order survive; nothing moves past "now".
   bit(32)::int would be signed, hence bigint. #}
{% macro shift_days(patient_expr) -%}
    (7 * (1 + (('x' || left({{ keyed_hash('shift', patient_expr) }}, 8))::bit(32)::bigint % 52)))::int
{%- endmacro %}

{% macro shift(ts, days) -%}
    ({{ ts }} - make_interval(days => {{ days }}))
{%- endmacro %}

{# HIPAA Safe Harbor: birth year only, and nothing that reveals an age over 89. #}
{% macro birth_year(birth_date, days, now) -%}
    case when extract(year from age({{ now }}::date, {{ birth_date }})) > 89 then null
         else extract(year from {{ shift(birth_date, days) }})::int end
{%- endmacro %}

{% macro age_group(birth_date, now) -%}
    case
        when extract(year from age({{ now }}::date, {{ birth_date }})) > 89 then '90+'
        when extract(year from age({{ now }}::date, {{ birth_date }})) >= 65 then '65-89'
        when extract(year from age({{ now }}::date, {{ birth_date }})) >= 45 then '45-64'
        when extract(year from age({{ now }}::date, {{ birth_date }})) >= 18 then '18-44'
        else '0-17'
    end
{%- endmacro %}
