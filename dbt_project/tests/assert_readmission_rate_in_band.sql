-- 30-day readmissions per live discharge (discharged at least 30 days before "now") lie in
-- readmission_band; outside it only beyond 3 standard errors of the rate, so small worlds are not
-- failed for noise. Independent draws of visits would give almost none.
-- A patient's stays never overlap (assert_no_overlapping_stays), so a readmission within 30 days is
-- the next admission: one window over the stays, linear in the world (a correlated EXISTS per
-- discharge was quadratic, 150 s of a 20,000-patient sync).
{% set low, high = var('readmission_band') %}
with now as (select {{ snapshot_now() }} as t),

stays as (
    select
        patient_id, cyrq, cyfs,
        lead(ryrq) over (partition by patient_id order by ryrq, visit_id) as next_admission
    from {{ ref('t_zy_visit') }}
    where visit_type = 'ZY'
),

discharges as (
    select coalesce(s.next_admission <= s.cyrq + interval '30 days', false) as readmitted
    from stays as s
    cross join now
    where s.cyrq <= now.t - interval '30 days' and s.cyfs <> 5
),

rate as (
    select count(*) as n, avg(readmitted::int) as r from discharges
)

select n as discharges, round(r, 4) as readmission_rate
from rate
where n = 0
   or r + 3 * sqrt(r * (1 - r) / n) < {{ low }}
   or r - 3 * sqrt(r * (1 - r) / n) > {{ high }}
