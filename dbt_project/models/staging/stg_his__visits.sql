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
