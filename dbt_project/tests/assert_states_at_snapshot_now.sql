-- Every row is as production showed it at the snapshot's "now": nothing after it, a stay open exactly
-- when its (shifted) discharge is later, a report pending exactly when its release is later, a ward
-- order running exactly when its stop is later. Production's times are shifted here independently
-- of staging, from the prod patient id.
with now as (select {{ snapshot_now() }} as t),

prod_stays as (
    select
        {{ pseudonym('vid', 'V', 'visit_id') }} as visit_id,
        {{ shift('cyrq', shift_days('patient_id')) }} as cyrq
    from {{ source('his', 't_zy_visit') }}
    where is_deleted = 0 and visit_type = 'ZY'
),

prod_labs as (
    select lab_id, {{ shift('report_time', shift_days('patient_id')) }} as report_time
    from {{ source('his', 't_lab_result') }}
    where is_deleted = 0
),

prod_ward_orders as (
    select order_id, {{ shift('jssj', shift_days('patient_id')) }} as jssj
    from {{ source('his', 't_med_order') }}
    where is_deleted = 0 and yzlx = 1
)

select 'stay open though discharged by now' as problem, e.visit_id as row_id
from {{ ref('t_zy_visit') }} as e
inner join prod_stays as p on p.visit_id = e.visit_id
cross join now
where e.visit_type = 'ZY' and (e.cyrq is null) <> (p.cyrq is null or p.cyrq > now.t)
union all
select 'report pending though released by now, or released though pending', e.lab_id::text
from {{ ref('t_lab_result') }} as e
inner join prod_labs as p on p.lab_id = e.lab_id
cross join now
where (e.report_time is null) <> (p.report_time is null or p.report_time > now.t)
union all
select 'ward order running though stopped by now, or stopped though running', e.order_id::text
from {{ ref('t_med_order') }} as e
inner join prod_ward_orders as p on p.order_id = e.order_id
cross join now
where (e.jssj is null) <> (p.jssj is null or p.jssj > now.t)
union all
select 'after now: ' || what, row_id
from (
    select 'visit', visit_id, greatest(ghrq, ryrq, cyrq) from {{ ref('t_zy_visit') }}
    union all select 'diagnosis', diag_id::text, zdsj from {{ ref('t_diag_record') }}
    union all select 'lab', lab_id::text, greatest(cysj, exec_time, report_time) from {{ ref('t_lab_result') }}
    union all select 'ward order', order_id::text, greatest(kssj, jssj) from {{ ref('t_med_order') }} where yzlx = 1
    union all select 'patient', patient_id, jdrq from {{ ref('t_patient_info') }}
) as rows_at (what, row_id, latest)
cross join now
where latest > now.t
