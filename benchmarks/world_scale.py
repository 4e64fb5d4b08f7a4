"""Is every step linear in the world? Each step's seconds at several world sizes, on a scratch cluster
per size (never yours), and each step's growth exponent between sizes: seconds ~ patients^k, so k near
1 is linear and k near 2 quadratic. Steps: generating production, the sync's dbt models and dbt tests
(and its slowest test), its GX suite, a release's golds on the snapshot (`testset validate`'s gold
checks), and its trap mutations and premises. A reference world's build is a generate plus a sync.
At each size it also prints the department x month grain, whether every gold and trap mutation ran,
and what an agent's runaway statements do there (capped or refused within their timeout, the harness's
memory bounded).

    .venv/bin/python benchmarks/world_scale.py [--sizes 2000,20000,100000] [--release vN]

A step that grows faster than about linearly (k > 1.3 over the largest span), or a probe past its
bound, is named at the end and the script exits 1.
"""

from __future__ import annotations

import argparse
import itertools
import math
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.recent_months import department_months, grain
from evalpkg.errors import QueryError
from evalpkg.prod.generator import generate
from evalpkg.services.stack import scratch_cluster
from evalpkg.settings import EVAL_DB, PROD_DB, PROJECT_ROOT, Settings
from evalpkg.sql.executor import ReadOnlyExecutor
from evalpkg.sql.gold import gold_runner
from evalpkg.sync.runner import run_sync
from evalpkg.testset import release
from evalpkg.testset.gold_checks import check_golds
from evalpkg.testset.models import Task
from evalpkg.testset.validate import discrimination

LINEAR_ENOUGH = 1.3  # sub-linear fixed costs pull small spans below 1; noise and n log n push above


def measure(patients: int, seed: int, version: str | None) -> tuple[dict[str, float], list[str]]:
    """Seconds per step for one world size, and the agent probes that broke a bound there."""
    seconds: dict[str, float] = {}
    with scratch_cluster() as settings:
        t0 = time.perf_counter()
        generate(settings.db_url(PROD_DB), patients, seed)
        seconds["generate"] = time.perf_counter() - t0
        sync = run_sync(settings, full_refresh=True)
        tests = [n for n in sync.nodes if n.kind in ("test", "unit_test")]
        seconds["dbt models"] = sum(n.seconds for n in sync.nodes if n.kind not in ("test", "unit_test"))
        seconds["dbt tests"] = sum(n.seconds for n in tests)
        slowest = max(tests, key=lambda n: n.seconds)
        seconds[f"slowest dbt test ({slowest.name[:40]})"] = slowest.seconds
        seconds["GX suite"] = sync.seconds["gx"]
        notes = [grain(department_months(settings.db_url(EVAL_DB)))]
        probe_lines, broken = agent_probes(settings)
        notes += probe_lines
        if version is not None:
            tasks = release.load(settings.tasks_dir, version).tasks
            seconds["golds"], failing = gold_seconds(settings, tasks)
            t0 = time.perf_counter()
            with gold_runner(settings) as golds:
                outcomes, _ = discrimination(golds, tasks)
            seconds["traps + premises"] = time.perf_counter() - t0
            unrun = sum(o.status == "error" for o in outcomes)
            notes.append(f"{failing} gold(s) failed or timed out, {unrun} trap mutation(s) did not run")
        print(f"  {patients:>7,} patients: " + ", ".join(f"{k} {v:.1f}s" for k, v in seconds.items()), flush=True)
        print("".join(f"{' ' * 18}{note}\n" for note in notes), end="", flush=True)
    return seconds, [f"{b} at {patients:,} patients" for b in broken]


# What an agent may send, run as the agents' tool runs it (row cap, byte caps, its own statement timeout)
PROBE_TIMEOUT_MS = 5000
PROBES = {
    "cross join": "select * from emr.t_lab_result a cross join emr.t_lab_result b",
    "100k rows": "select * from emr.t_lab_result order by lab_id limit 100000",
    "runaway count": "select count(*) from emr.t_lab_result a join emr.t_lab_result b on a.cysj < b.cysj",
}


def agent_probes(settings: Settings) -> tuple[list[str], list[str]]:
    """(one line per probe, the probes that broke a bound): each ends capped or refused within its statement
    timeout (plus a second), and the harness grows by under 64 MB."""
    lines, broken = [], []
    executor = ReadOnlyExecutor(settings.agent_url(), timeout_ms=PROBE_TIMEOUT_MS)
    try:
        executor.run("select 1")  # the pooled session is open before measuring
        for name, statement in PROBES.items():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            t0 = time.perf_counter()
            try:
                result = executor.run(statement)
                outcome = (
                    f"{len(result.rows)} rows of {'more than ' if not result.total_known else ''}{result.total_rows}"
                )
            except QueryError as exc:
                outcome = str(exc).splitlines()[0][:60]
            elapsed = time.perf_counter() - t0
            grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
            lines.append(f"agent probe {name}: {outcome} in {elapsed:.1f}s, peak RSS +{grew:.0f} MB")
            if elapsed > PROBE_TIMEOUT_MS / 1000 + 1 or grew > 64:
                broken.append(f"agent probe {name}")
    finally:
        executor.close()
    return lines, broken


def gold_seconds(settings: Settings, tasks: list[Task]) -> tuple[float, int]:
    """Seconds for every gold check of the tasks, and how many golds failed to run (timeouts included)."""
    with gold_runner(settings) as golds:
        t0 = time.perf_counter()
        found = [p for task in tasks for p in check_golds(task, golds)]
    return time.perf_counter() - t0, sum(p.code == "fails" for p in found)


def exponent(small: tuple[int, float], large: tuple[int, float]) -> float:
    (n1, t1), (n2, t2) = small, large
    if t1 <= 0 or t2 <= 0:
        return float("nan")
    return math.log(t2 / t1) / math.log(n2 / n1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000,100000", help="patients per world, comma-separated")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--release", default=None, help="whose golds, traps and premises to time (default: the latest; '' for none)"
    )
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if len(sizes) < 2:
        parser.error("--sizes needs at least two sizes")
    version = release.latest(PROJECT_ROOT / "tasks") if args.release is None else args.release or None
    print(f"world scale: sizes {sizes}, seed {args.seed}, release {version or 'none'}", flush=True)
    measured = {n: measure(n, args.seed, version) for n in sizes}
    by_size = {n: seconds for n, (seconds, _) in measured.items()}
    broken_bounds = [b for _, broken in measured.values() for b in broken]

    steps = [s for s in by_size[sizes[0]] if not s.startswith("slowest")]
    spans = list(itertools.pairwise(sizes))
    head = f"{'step':<22}" + "".join(f"{n:>10,}" for n in sizes)
    print("\n" + head + "".join(f"{f'k {a // 1000}k-{b // 1000}k':>12}" for a, b in spans))
    too_fast = []
    for step in steps:
        row = [by_size[n][step] for n in sizes]
        ks = [exponent((a, by_size[a][step]), (b, by_size[b][step])) for a, b in spans]
        print(f"{step:<22}" + "".join(f"{t:>9.1f}s" for t in row) + "".join(f"{k:>12.2f}" for k in ks))
        overall = exponent((sizes[0], row[0]), (sizes[-1], row[-1]))
        if ks[-1] > LINEAR_ENOUGH and overall > LINEAR_ENOUGH:
            too_fast.append(f"{step} (k {ks[-1]:.2f})")
    for n in sizes:
        slowest = next(s for s in by_size[n] if s.startswith("slowest"))
        print(f"{n:>7,} patients: {slowest} {by_size[n][slowest]:.1f}s")
    if broken_bounds:
        print(f"\nbounds broken: {', '.join(broken_bounds)}")
    if too_fast:
        print(f"\nfaster than linear: {', '.join(too_fast)}")
    if too_fast or broken_bounds:
        return 1
    print(f"\nevery step within k <= {LINEAR_ENOUGH} over the largest span")
    return 0


if __name__ == "__main__":
    sys.exit(main())
