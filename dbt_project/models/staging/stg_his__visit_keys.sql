-- Visit pseudonym -> patient pseudonym and the patient's date offset, hashed once per visit.
-- Stored in the sync-only staging schema, keyed by pseudonym: no raw identifier is kept.
-- Fact models hash their own visit_id once per row and join here, instead of re-deriving
-- patient keys and offsets for every fact table.
{{ config(materialized='table', indexes=[{'columns': ['visit_key'], 'unique': true}]) }}

with visits as (
    select visit_id, patient_id from {{ source('his', 't_zy_visit') }}
),

patient_keys as (
    select
        patient_id,
        {{ pseudonym('pid', 'P', 'patient_id') }} as patient_key,
        {{ shift_days('patient_id') }} as shift_days
    from (select distinct patient_id from visits) as patients
)

select
    {{ pseudonym('vid', 'V', 'visits.visit_id') }} as visit_key,
    patient_keys.patient_key,
    patient_keys.shift_days
from visits
inner join patient_keys on patient_keys.patient_id = visits.patient_id
