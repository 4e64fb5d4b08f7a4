-- Visits begun by the snapshot's "now"; a stay discharged after it is still open (no discharge time,
-- length or way yet), as production showed it then.
with shifted as (
    select
        keys.visit_key as visit_id,
        keys.patient_key as patient_id,
        v.visit_type,
        v.ksdm,
        {{ shift('v.ghrq', 'keys.shift_days') }} as ghrq,
        {{ shift('v.ryrq', 'keys.shift_days') }} as ryrq,
        {{ shift('v.cyrq', 'keys.shift_days') }} as cyrq,
        v.zyts,
        v.cyfs
    from {{ source('his', 't_zy_visit') }} as v
    inner join {{ ref('stg_his__visit_keys') }} as keys
        on keys.visit_key = {{ pseudonym('vid', 'V', 'v.visit_id') }}
    where v.is_deleted = 0
)

select
    visit_id,
    patient_id,
    visit_type,
    ksdm,
    ghrq,
    ryrq,
    {{ as_at_now('cyrq') }} as cyrq,
    case when cyrq <= {{ snapshot_now() }} then zyts end as zyts,
    case when cyrq <= {{ snapshot_now() }} then cyfs end as cyfs
from shifted
where ryrq <= {{ snapshot_now() }}
