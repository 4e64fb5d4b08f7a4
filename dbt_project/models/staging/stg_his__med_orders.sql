-- Orders started by the snapshot's "now"; a ward order stopped after it is still running.
select
    o.order_id,
    keys.visit_key as visit_id,
    keys.patient_key as patient_id,
    o.ypdm,
    o.ypmc,
    o.jl,
    o.jldw,
    o.pc,
    o.gytj,
    o.yzlx,
    {{ shift('o.kssj', 'keys.shift_days') }} as kssj,
    -- A ward (long-term) order stops when it is stopped; an outpatient prescription's stop is planned.
    case when o.yzlx = 1 then {{ as_at_now(shift('o.jssj', 'keys.shift_days')) }}
         else {{ shift('o.jssj', 'keys.shift_days') }} end as jssj,
    o.zfbz
from {{ source('his', 't_med_order') }} as o
inner join {{ ref('stg_his__visit_keys') }} as keys
    on keys.visit_key = {{ pseudonym('vid', 'V', 'o.visit_id') }}
where o.is_deleted = 0
    and {{ shift('o.kssj', 'keys.shift_days') }} <= {{ snapshot_now() }}
