-- Tests run by the snapshot's "now"; a report released after it has no report time yet.
select
    l.lab_id,
    keys.visit_key as visit_id,
    keys.patient_key as patient_id,
    l.xmdm,
    l.xmmc,
    l.result_value,
    l.unit,
    l.ref_range,
    l.result_flag,
    l.bgzt,
    l.bz,
    {{ shift('l.cysj', 'keys.shift_days') }} as cysj,
    {{ shift('l.exec_time', 'keys.shift_days') }} as exec_time,
    {{ as_at_now(shift('l.report_time', 'keys.shift_days')) }} as report_time,
    l.update_time as src_update_time
from {{ source('his', 't_lab_result') }} as l
inner join {{ ref('stg_his__visit_keys') }} as keys
    on keys.visit_key = {{ pseudonym('vid', 'V', 'l.visit_id') }}
where l.is_deleted = 0
    and {{ shift('l.exec_time', 'keys.shift_days') }} <= {{ snapshot_now() }}
