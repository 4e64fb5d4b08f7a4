-- What agents read through query_dictionary: the prod dictionary adjusted for de-identification.
select table_name, column_name, meaning, meaning_en, unit, code_mapping, null_meaning, time_semantics
from {{ ref('stg_meta__data_dictionary') }}
where (table_name, column_name) not in (
    select table_name, column_name from {{ ref('deid_dictionary') }} where action = 'replace'
)
union all
select table_name, column_name, meaning, meaning_en, unit, code_mapping, null_meaning, time_semantics
from {{ ref('deid_dictionary') }}
where action in ('add', 'replace')
