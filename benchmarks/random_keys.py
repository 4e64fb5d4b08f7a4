"""What another de-identification key changes. The suite and every user's snapshot get a random key, and the key's
date shifts decide which rows a month or a year holds; a release makes its data claims for the fixed reference
worlds only. For N random keys on one world (a scratch cluster, a sync per key) this prints:

- per release, the share of keys on which some gold finds no row, ties or leaves an answer point undecided (what
  `testset validate` reports there), and which tasks;
- with --perturbations, the share of keys on which the scorer and the perturbation test's independent reference
  (tests/pipeline/test_pipeline.py) part on a perturbed gold (the gold agent with one defect), and where: each
  is a scorer false positive or false negative, or a reference that misreads a documented rule;
- with --traps, the share of keys on which a tagged trap of the latest release does not bite or its mutation
  fails to run, and a premise fails (what `testset validate` reports outside the reference worlds).

A key on which the sync's checks fail, or a gold fails to run, is a failure: the script prints it with the
key (EVALPKG_TEST_KEY=<hex> reruns the test suite under it) and exits 1.

    .venv/bin/python benchmarks/random_keys.py --keys 50 --releases v3,v9 --perturbations --traps
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalpkg.errors import EvalpkgError
from evalpkg.grading.execution import GoldCache, asked_columns, execution_match
from evalpkg.grading.reference import SQL_PERTURBATIONS, reference_reads
from evalpkg.prod.generator import generate
from evalpkg.services import bootstrap
from evalpkg.services.stack import scratch_cluster
from evalpkg.settings import PROD_DB, README_PATIENTS, Settings
from evalpkg.sql.gold import gold_runner
from evalpkg.sync.runner import run_sync
from evalpkg.testset import release
from evalpkg.testset.gold_checks import check_golds
from evalpkg.testset.models import Task
from evalpkg.testset.traps import perturb_sql
from evalpkg.testset.validate import discrimination


def gold_problems(settings: Settings, tasks: list[Task]) -> tuple[list[str], list[str]]:
    """(what the data decides: findings; what fails on any snapshot: failures)"""
    with gold_runner(settings) as golds:
        found = [p for t in tasks for p in check_golds(t, golds)]
    return [f"{p.task} {p.code}" for p in found if p.data_decided], [str(p) for p in found if not p.data_decided]


def trap_findings(settings: Settings, tasks: list[Task]) -> tuple[list[str], list[str]]:
    """(traps that do not bite and failed premises: findings; mutations that fail to run: failures)"""
    with gold_runner(settings) as golds:
        outcomes, premise_findings = discrimination(golds, tasks)
    findings = [f"trap {o.task_id} [{o.tag}] does not bite" for o in outcomes if o.status == "does_not_bite"]
    findings += [f"premise {f.line()}" for f in premise_findings]
    return findings, [f"trap {o.line()}" for o in outcomes if o.status == "error"]


def parted(settings: Settings, tasks: list[Task]) -> list[str]:
    """Where the scorer's verdict on a perturbed gold (the zh/plain variant) differs from the reference's."""
    found = []
    with gold_runner(settings) as golds:
        cache = GoldCache(golds)
        for kind in SQL_PERTURBATIONS:
            for task in tasks:
                if not task.gold_sql or (changed := perturb_sql(task.gold_sql[0], kind)) == task.gold_sql[0]:
                    continue
                reference = reference_reads(cache, task, changed)[0]
                scorer = execution_match(task, changed, cache, asked_columns(task, "zh", "plain"))[1]
                if reference != scorer:
                    found.append(f"{kind} {task.id}: scorer {scorer}, reference {reference}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--patients", type=int, default=README_PATIENTS, help="default: the reference scale")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--releases", default="", help="comma-separated; default: the latest")
    parser.add_argument("--perturbations", action="store_true", help="also compare scorer and reference")
    parser.add_argument("--traps", action="store_true", help="also run the trap mutations and premises")
    args = parser.parse_args()
    failures: list[str] = []
    with scratch_cluster() as settings:
        generate(settings.db_url(PROD_DB), args.patients, args.seed)
        versions = [v for v in args.releases.split(",") if v] or [release.load(settings.tasks_dir).version]
        releases = {v: release.load(settings.tasks_dir, v).tasks for v in versions}
        keys_with: Counter[str] = Counter()
        where: Counter[str] = Counter()
        for k in range(1, args.keys + 1):
            start = time.monotonic()
            key = secrets.token_bytes(32)
            bootstrap.set_key(settings, key, replace=True)  # a new random key: new pseudonyms and date shifts
            failed: list[str] = []
            try:
                run_sync(settings, full_refresh=True)
            except EvalpkgError as exc:
                failed.append(f"sync: {exc}")
            for version, tasks in releases.items() if not failed else ():
                findings, broken = gold_problems(settings, tasks)
                failed += [f"{version} {b}" for b in broken]
                if findings:
                    keys_with[version] += 1
                    where.update(f"{version} {f}" for f in findings)
            if args.perturbations and not failed and (found := parted(settings, releases[versions[-1]])):
                keys_with["perturbations"] += 1
                where.update(found)
            if args.traps and not failed:
                findings, broken = trap_findings(settings, releases[versions[-1]])
                failed += broken
                if findings:
                    keys_with["traps"] += 1
                    where.update(f"{versions[-1]} {f}" for f in findings)
            failures += [f"key {k} (EVALPKG_TEST_KEY={key.hex()}): {f}" for f in failed]
            print(
                f"key {k}/{args.keys}: {time.monotonic() - start:.0f} s, {len(failed)} failure(s)",
                file=sys.stderr,
                flush=True,
            )
    print(f"{args.keys} random keys, {args.patients} patients, seed {args.seed}")
    measures = {v: "a gold finds no row, ties or no point" for v in versions}
    if args.perturbations:
        measures["perturbations"] = "scorer and reference part"
    if args.traps:
        measures["traps"] = f"a trap of {versions[-1]} does not bite or a premise fails"
    for name, what in measures.items():
        print(f"{name}: {what} on {keys_with[name]}/{args.keys} keys ({keys_with[name] / args.keys:.0%})")
    for line, n in where.most_common():
        print(f"  {n}x {line}")
    print(f"failures: {len(failures)}")
    for line in failures:
        print(f"  {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
