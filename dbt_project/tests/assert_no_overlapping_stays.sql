-- A patient is in hospital once at a time: no stay begins before the same patient's earlier one ended.
select a.patient_id, a.visit_id as earlier, b.visit_id as later
from {{ ref('t_zy_visit') }} as a
inner join {{ ref('t_zy_visit') }} as b
    on b.patient_id = a.patient_id
    and b.visit_id <> a.visit_id
    and (b.ryrq, b.visit_id) > (a.ryrq, a.visit_id)
    and b.ryrq < coalesce(a.cyrq, 'infinity'::timestamp)
where a.visit_type = 'ZY' and b.visit_type = 'ZY'
