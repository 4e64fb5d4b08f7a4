"""Is the de-identified world true to production up to its "now"? Monthly visits and admissions over the 24
months before the snapshot's pinned "now", production vs the eval DB, and the ratio the shift artifact shows
in: the last 12 months' volume over the 12 before them. Production's volume is steady (its ratio is printed as
the baseline), so the eval DB's ratio must lie within 15% of 1, or within 4 standard errors of its counts where
that is wider (the rule of dbt's assert_recent_year_volume_steady, which fails the sync; its error counts
patients as the units and is wider than this one in a small world). Reads the built world
(`evalpkg up`, `prod generate`, `sync`).

    .venv/bin/python benchmarks/recent_months.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalpkg.db import connect
from evalpkg.settings import EVAL_DB, PROD_DB, get_settings

BAND = 0.15
MONTHS = 24

# One row per month over the 24 months ending with the snapshot's month: visits (MZ) and admissions (ZY)
# by their visit time, deleted rows left out as the eval DB leaves them out.
MONTHLY = """
with months as (
    select generate_series(date_trunc('month', %(now)s::timestamp) - interval '{back} months',
                           date_trunc('month', %(now)s::timestamp), interval '1 month') as month
)
select to_char(m.month, 'YYYY-MM'),
       count(v.*) filter (where v.visit_type = 'MZ'),
       count(v.*) filter (where v.visit_type = 'ZY')
from months m
left join {table} v on date_trunc('month', v.ryrq) = m.month {live}
group by m.month order by m.month
""".replace("{back}", str(MONTHS - 1))


# Every department with an outpatient visit in the last 12 months, by month (a month without one is a 0).
DEPT_MONTHS = """
with months as (
    select generate_series(date_trunc('month', %(now)s::timestamp) - interval '11 months',
                           date_trunc('month', %(now)s::timestamp), interval '1 month') as month
), depts as (
    select distinct ksdm from emr.t_zy_visit
    where visit_type = 'MZ' and ryrq > %(now)s::timestamp - interval '12 months'
)
select count(v.*)
from depts d cross join months m
left join emr.t_zy_visit v
    on v.ksdm = d.ksdm and v.visit_type = 'MZ' and date_trunc('month', v.ryrq) = m.month
group by d.ksdm, m.month
"""


def monthly(url: str, table: str, live: str, now: object) -> list[tuple[str, int, int]]:
    with connect(url) as conn:
        rows = conn.execute(MONTHLY.format(table=table, live=live), {"now": now}).fetchall()
    return [(str(month), int(mz), int(zy)) for month, mz, zy in rows]


def ratio(rows: list[tuple[str, int, int]], column: int) -> tuple[float, float]:
    """The last 12 months over the 12 before them, and the band it must lie in around 1."""
    counts = [int(r[column]) for r in rows]
    before, last = sum(counts[:12]), sum(counts[12:])
    if not before:
        return float("nan"), 0.0
    return last / before, max(BAND, 4 * math.sqrt(1 / max(last, 1) + 1 / before))


def main() -> int:
    settings = get_settings()
    with connect(settings.db_url(EVAL_DB)) as conn:
        snapshot = conn.execute("select pinned_now, snapshot_version from meta.snapshot").fetchone()
    if snapshot is None:
        print("no snapshot: build one first (evalpkg prod generate, evalpkg sync)", file=sys.stderr)
        return 2
    now, version = snapshot
    prod = monthly(settings.db_url(PROD_DB), "his.t_zy_visit", "and v.is_deleted = 0", now)
    eval_ = monthly(settings.db_url(EVAL_DB), "emr.t_zy_visit", "", now)
    print(f"snapshot {version}, now {now}: visits (MZ) and admissions (ZY) per month")
    print(f"{'month':8} {'prod MZ':>8} {'eval MZ':>8} {'prod ZY':>8} {'eval ZY':>8}")
    for (month, pmz, pzy), (_, emz, ezy) in zip(prod, eval_, strict=True):
        print(f"{month:8} {pmz:8} {emz:8} {pzy:8} {ezy:8}")
    failed = False
    for column, kind in ((1, "visits"), (2, "admissions")):
        (base, _), (ours, band) = ratio(prod, column), ratio(eval_, column)
        inside = abs(ours - 1) <= band
        failed |= not inside
        print(
            f"{kind}: last 12 months / the 12 before: prod {base:.2f}, eval {ours:.2f} "
            f"({'inside' if inside else 'outside'} the band 1 ± {band:.2f})"
        )
    cells = department_months(settings.db_url(EVAL_DB))
    print(grain(cells) + " (a department's month-over-month change rests on these)")
    return 1 if failed else 0


def department_months(eval_url: str) -> list[int]:
    """Outpatient visits per department x month over the 12 months before the snapshot's "now", sorted."""
    with connect(eval_url) as conn:
        row = conn.execute("select pinned_now from meta.snapshot").fetchone()
        cells = [int(n) for (n,) in conn.execute(DEPT_MONTHS, {"now": row[0] if row else None})]
    return sorted(cells)


def grain(cells: list[int]) -> str:
    median = cells[len(cells) // 2] if cells else 0
    return (
        f"department x month outpatient visits over the last 12 months ({len(cells)} cells): "
        f"median {median}, under 10 in {sum(n < 10 for n in cells)}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
