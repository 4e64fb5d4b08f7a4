-- Direct identifiers (brxm, sfzh, lxdh, jtzz) are never selected; birth date becomes a year.
-- Patients registered by the snapshot's "now".
with source as (
    select * from {{ source('his', 't_patient_info') }} where is_deleted = 0
),

info as (
    select as_of from {{ source('meta', 'his_info') }}
),

keyed as (
    select
        source.*,
        info.as_of,
        {{ shift_days('source.patient_id') }} as shift_days
    from source
    cross join info
)

select
    {{ pseudonym('pid', 'P', 'patient_id') }} as patient_id,
    {{ birth_year('csrq', 'shift_days', 'as_of') }} as csnf,
    {{ age_group('csrq', 'shift_days', 'as_of') }} as nlfz,
    xb,
    hyzk,
    {{ shift('jdrq', 'shift_days') }} as jdrq
from keyed
where {{ shift('jdrq', 'shift_days') }} <= {{ snapshot_now() }}
