-- Free-text diagnoses may carry names or other identifiers: replaced by the seed's wording.
-- Only diagnoses made by the snapshot's "now".
select
    d.diag_id,
    keys.visit_key as visit_id,
    keys.patient_key as patient_id,
    d.icd10_code,
    coalesce(m.zdmc_std, '未映射诊断') as zdmc,
    d.zdlx,
    {{ shift('d.zdsj', 'keys.shift_days') }} as zdsj
from {{ source('his', 't_diag_record') }} as d
inner join {{ ref('stg_his__visit_keys') }} as keys
    on keys.visit_key = {{ pseudonym('vid', 'V', 'd.visit_id') }}
left join {{ ref('diag_text_map') }} as m on m.icd10_code = d.icd10_code
where d.is_deleted = 0
    and {{ shift('d.zdsj', 'keys.shift_days') }} <= {{ snapshot_now() }}
