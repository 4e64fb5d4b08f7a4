-- The year before the snapshot's "now" holds as many visits and admissions as the year before it
-- (within recent_volume_band, or 4 standard errors of the ratio where that is wider): a shift that
-- thins the last months, or visits placed by hand near "now", fail here. The standard error counts
-- patients, not visits, as the independent units: a patient's visits move together with its one date
-- shift, so a key's shifts scatter the ratio more than counts of independent visits would (at 2,000
-- patients a key drew 1.28 where production's own ratio was 0.97; random keys spread it by about 0.065,
-- the visit-count error says 0.062, the patient-level one 0.083). A measure with fewer than
-- recent_volume_min_count events in the year before is too small to tell and is not checked.
with now as (select {{ snapshot_now() }} as t),

per_patient as (
    select
        measure,
        patient_id,
        count(*) filter (where happened > now.t - interval '365 days') as last_year,
        count(*) filter (where happened <= now.t - interval '365 days') as year_before
    from (
        select 'visits' as measure, patient_id, ryrq as happened from {{ ref('t_zy_visit') }}
        union all
        select 'admissions', patient_id, ryrq from {{ ref('t_zy_visit') }} where visit_type = 'ZY'
    ) as events
    cross join now
    where happened > now.t - interval '730 days'
    group by measure, patient_id
),

totals as (
    select measure, sum(last_year) as last_year, sum(year_before) as year_before
    from per_patient
    group by measure
    having sum(year_before) >= {{ var('recent_volume_min_count') }}
),

ratios as (
    -- the ratio's standard error by the delta method over patients: sqrt(sum (l - r b)^2) / B
    select
        t.measure,
        t.last_year,
        t.year_before,
        t.last_year::numeric / t.year_before as ratio,
        sqrt(sum((p.last_year - p.year_before * t.last_year::numeric / t.year_before) ^ 2)) / t.year_before
            as standard_error
    from totals as t
    inner join per_patient as p using (measure)
    group by t.measure, t.last_year, t.year_before
)

select measure, last_year, year_before, round(ratio, 3) as ratio, round(standard_error, 3) as standard_error
from ratios
where abs(ratio - 1) > greatest({{ var('recent_volume_band') }}, 4 * standard_error)
