-- No raw patient/visit id survives as a key, and no free-text diagnosis reaches the marts.
select 'patient_id' as col, e.patient_id as value
from {{ ref('t_patient_info') }} e
join {{ source('his', 't_patient_info') }} p on p.patient_id = e.patient_id
union all
select 'visit_id', e.visit_id
from {{ ref('t_zy_visit') }} e
join {{ source('his', 't_zy_visit') }} v on v.visit_id = e.visit_id
union all
select 'zdmc', d.zdmc
from {{ ref('t_diag_record') }} d
where d.zdmc not in (select zdmc_std from {{ ref('diag_text_map') }}) and d.zdmc <> '未映射诊断'
