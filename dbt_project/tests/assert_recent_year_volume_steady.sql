-- The year before the snapshot's "now" holds as many visits and admissions as the year before it
-- (within recent_volume_band, or 4 standard errors of the counts where that is wider: the world's own
-- draw and the key's shifts each add a count's noise to the ratio): a shift that
-- thins the last months, or visits placed by hand near "now", fail here. A measure with fewer than
-- recent_volume_min_count events in the year before is too small to tell and is not checked.
with now as (select {{ snapshot_now() }} as t),

counts as (
    select
        measure,
        count(*) filter (where happened > now.t - interval '365 days') as last_year,
        count(*) filter (where happened <= now.t - interval '365 days') as year_before
    from (
        select 'visits' as measure, ryrq as happened from {{ ref('t_zy_visit') }}
        union all
        select 'admissions', ryrq from {{ ref('t_zy_visit') }} where visit_type = 'ZY'
    ) as events
    cross join now
    where happened > now.t - interval '730 days'
    group by measure
)

select measure, last_year, year_before, round(last_year::numeric / nullif(year_before, 0), 3) as ratio
from counts
where year_before >= {{ var('recent_volume_min_count') }}
  and abs(last_year::numeric / year_before - 1) > greatest(
        {{ var('recent_volume_band') }},
        4 * sqrt(1.0 / greatest(last_year, 1) + 1.0 / year_before))
