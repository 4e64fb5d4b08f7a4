-- Raw visit id -> pseudonyms and the patient's date offset. Ephemeral: inlined into each fact
-- model, never stored, so no raw identifier lands in the eval DB. Hashing once per visit
-- instead of once per fact row keeps the sync near the copy floor.
with visits as (
    select visit_id, patient_id from {{ source('his', 't_zy_visit') }}
),

patients as (
    select distinct patient_id from visits
),

patient_keys as (
    select
        patient_id,
        {{ pseudonym('pid', 'P', 'patient_id') }} as patient_key,
        {{ shift_days('patient_id') }} as shift_days
    from patients
)

select
    visits.visit_id,
    {{ pseudonym('vid', 'V', 'visits.visit_id') }} as visit_key,
    patient_keys.patient_key,
    patient_keys.shift_days
from visits
inner join patient_keys on patient_keys.patient_id = visits.patient_id
