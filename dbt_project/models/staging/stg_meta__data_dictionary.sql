-- The production dictionary minus the columns that de-identification drops.
select table_name, column_name, meaning, meaning_en, unit, code_mapping, null_meaning, time_semantics
from {{ source('meta', 'data_dictionary') }}
where (table_name, column_name) not in (
    select table_name, column_name from {{ ref('deid_dictionary') }} where action = 'drop'
)
