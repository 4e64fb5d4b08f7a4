"""What another de-identification key changes. The suite and every user's snapshot get a random key, and the key's
date shifts decide which rows a month or a year holds; a release makes its data claims for the fixed reference
worlds only. For N random keys on one world (a scratch cluster, a sync per key) this prints:

- per release, the share of keys on which some gold finds no row, ties or leaves an answer point undecided (what
  `testset validate` reports there), and which tasks;
- with --perturbations, the share of keys on which the scorer and the perturbation test's independent reference
  (tests/pipeline/test_pipeline.py) part on a perturbed gold (the gold agent with one defect), and where: each
  is a scorer false positive or false negative, or a reference that misreads a documented rule.

    .venv/bin/python benchmarks/random_keys.py --keys 30 --releases v3,v9 --perturbations
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalpkg.grading.execution import GoldCache, asked_columns, execution_match
from evalpkg.prod.generator import generate
from evalpkg.services import bootstrap
from evalpkg.services.stack import scratch_cluster
from evalpkg.settings import PROD_DB, Settings
from evalpkg.sync.runner import run_sync
from evalpkg.testset import release
from evalpkg.testset.gold import GoldRunner, agent_connection, gold_executor
from evalpkg.testset.gold_checks import check_golds
from evalpkg.testset.models import Task
from evalpkg.testset.traps import perturb_sql
from tests.pipeline.test_pipeline import PERTURBATIONS, reference_reads


def gold_findings(settings: Settings, tasks: list[Task]) -> list[str]:
    with agent_connection(settings) as conn:
        golds = GoldRunner(conn)
        return [f"{p.task} {p.code}" for t in tasks for p in check_golds(t, golds) if p.data_decided]


def parted(settings: Settings, tasks: list[Task]) -> list[str]:
    """Where the scorer's verdict on a perturbed gold (the zh/plain variant) differs from the reference's."""
    executor = gold_executor(settings)
    cache = GoldCache(executor)
    found = []
    try:
        with agent_connection(settings) as conn:
            for kind in PERTURBATIONS:
                for task in tasks:
                    if not task.gold_sql or (changed := perturb_sql(task.gold_sql[0], kind)) == task.gold_sql[0]:
                        continue
                    reference = reference_reads(conn, cache, task, changed)[0]
                    scorer = execution_match(task, changed, cache, executor, asked_columns(task, "zh", "plain"))[1]
                    if reference != scorer:
                        found.append(f"{kind} {task.id}: scorer {scorer}, reference {reference}")
    finally:
        executor.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--patients", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--releases", default="", help="comma-separated; default: the latest")
    parser.add_argument("--perturbations", action="store_true", help="also compare scorer and reference")
    args = parser.parse_args()
    with scratch_cluster() as settings:
        generate(settings.db_url(PROD_DB), args.patients, args.seed)
        versions = [v for v in args.releases.split(",") if v] or [release.load(settings.tasks_dir).version]
        releases = {v: release.load(settings.tasks_dir, v).tasks for v in versions}
        keys_with: Counter[str] = Counter()
        where: Counter[str] = Counter()
        for k in range(1, args.keys + 1):
            start = time.monotonic()
            bootstrap.set_key(settings, replace=True)  # a new random key: new pseudonyms and date shifts
            run_sync(settings, full_refresh=True)
            for version, tasks in releases.items():
                if findings := gold_findings(settings, tasks):
                    keys_with[version] += 1
                    where.update(f"{version} {f}" for f in findings)
            if args.perturbations and (found := parted(settings, releases[versions[-1]])):
                keys_with["perturbations"] += 1
                where.update(found)
            print(f"key {k}/{args.keys}: {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    print(f"{args.keys} random keys, {args.patients} patients, seed {args.seed}")
    for name in [*versions, *(["perturbations"] if args.perturbations else [])]:
        what = "scorer and reference part" if name == "perturbations" else "a gold finds no row, ties or no point"
        print(f"{name}: {what} on {keys_with[name]}/{args.keys} keys ({keys_with[name] / args.keys:.0%})")
    for line, n in where.most_common():
        print(f"  {n}x {line}")


if __name__ == "__main__":
    main()
