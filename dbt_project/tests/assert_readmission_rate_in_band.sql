-- 30-day readmissions per live discharge (discharged at least 30 days before "now") lie in
-- readmission_band; outside it only beyond 3 standard errors of the rate, so small worlds are not
-- failed for noise. Independent draws of visits would give almost none.
{% set low, high = var('readmission_band') %}
with now as (select {{ snapshot_now() }} as t),

discharges as (
    select
        a.visit_id,
        exists (
            select 1 from {{ ref('t_zy_visit') }} as b
            where b.patient_id = a.patient_id and b.visit_type = 'ZY'
                and b.ryrq > a.cyrq and b.ryrq <= a.cyrq + interval '30 days'
        ) as readmitted
    from {{ ref('t_zy_visit') }} as a
    cross join now
    where a.visit_type = 'ZY' and a.cyrq <= now.t - interval '30 days' and a.cyfs <> 5
),

rate as (
    select count(*) as n, avg(readmitted::int) as r from discharges
)

select n as discharges, round(r, 4) as readmission_rate
from rate
where n = 0
   or r + 3 * sqrt(r * (1 - r) / n) < {{ low }}
   or r - 3 * sqrt(r * (1 - r) / n) > {{ high }}
