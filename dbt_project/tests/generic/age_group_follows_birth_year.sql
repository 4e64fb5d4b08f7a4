{# The age group is the group of the age the birth year shows at the snapshot (its year minus the
   birth year); no birth year means 90+, and a birth year showing an age over 89 agrees with nothing.
   Written out here rather than through the deid macros, so a wrong macro cannot agree with itself. #}
{% test age_group_follows_birth_year(model, birth_year, age_group) %}
with snapshot as (
    select extract(year from as_of)::int as year from {{ source('meta', 'his_info') }}
)

select m.{{ birth_year }}, m.{{ age_group }}
from {{ model }} as m
cross join snapshot as s
where m.{{ age_group }} is distinct from case
    when m.{{ birth_year }} is null then '90+'
    when s.year - m.{{ birth_year }} > 89 then null
    when s.year - m.{{ birth_year }} >= 65 then '65-89'
    when s.year - m.{{ birth_year }} >= 45 then '45-64'
    when s.year - m.{{ birth_year }} >= 18 then '18-44'
    else '0-17'
end
{% endtest %}
