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

{# HIPAA Safe Harbor: birth year only, and nothing that reveals an age over 89. Both columns follow
   one rule, so they never contradict each other: the age shown is the snapshot's year minus the
   shifted birth year. The shift only moves dates back, so that age is never below the true one;
   over 89 shows no birth year and the group '90+'. #}
{% macro shown_age(birth_date, days, now) -%}
    (extract(year from {{ now }}::date)::int - extract(year from {{ shift(birth_date, days) }})::int)
{%- endmacro %}

{% macro birth_year(birth_date, days, now) -%}
    case when {{ shown_age(birth_date, days, now) }} > 89 then null
         else extract(year from {{ shift(birth_date, days) }})::int end
{%- endmacro %}

{% macro age_group(birth_date, days, now) -%}
    {%- set age = shown_age(birth_date, days, now) -%}
    case
        when {{ age }} > 89 then '90+'
        when {{ age }} >= 65 then '65-89'
        when {{ age }} >= 45 then '45-64'
        when {{ age }} >= 18 then '18-44'
        else '0-17'
    end
{%- endmacro %}

{# The snapshot's pinned "now": the end of meta.his_info.as_of. Production runs 52 weeks (the largest
   shift) past it, so every patient is whole up to it; what a shift moves past it is not synced yet,
   and every state (an open stay, a pending report, a running order) is the state at it. #}
{% macro snapshot_now() -%}
    (select (as_of + interval '1 day' - interval '1 second')::timestamp from {{ source('meta', 'his_info') }})
{%- endmacro %}

{# A shifted time as it stands at the snapshot's "now": NULL while it is still to come. #}
{% macro as_at_now(shifted) -%}
    case when {{ shifted }} <= {{ snapshot_now() }} then {{ shifted }} end
{%- endmacro %}
