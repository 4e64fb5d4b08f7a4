"""The reference worlds' two budgets on this machine, measured from nothing: the six worlds built (at most
5 minutes; in parallel, `worlds.build_missing`) and a release validated in each of them (`testset validate
--reference-worlds`: at most 10 minutes). With --patients N, at the worlds' seeds and keys scaled to a README
world of N patients (`worlds.scaled`), the size a next release's worlds are chosen at. The worlds are built
into a temporary directory (never yours) and removed afterwards, or with --keep where `testset worlds` keeps
them (the ones already built there are not measured again); it prints what validate found too.

    .venv/bin/python benchmarks/reference_budget.py [--patients 50000] [--version v9] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalpkg.settings import get_settings
from evalpkg.testset import worlds
from evalpkg.testset.validate import validate_reference

BUILD_BUDGET_S, VALIDATE_BUDGET_S = 300, 600


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, help="the README world's size (default: the worlds as they are)")
    parser.add_argument("--version", help="the release to validate (default: the latest)")
    parser.add_argument("--keep", action="store_true", help="build them where `testset worlds` keeps them")
    args = parser.parse_args()
    reference = worlds.scaled(args.patients) if args.patients else worlds.WORLDS
    settings = get_settings()
    home = None
    if not args.keep:
        home = Path(tempfile.mkdtemp(prefix="evalpkg-budget-"))
        home.chmod(0o755)  # the 'postgres' user must reach it when this runs as root
        settings = settings.model_copy(update={"worlds_dir": home})
    print(f"{len(worlds.built(settings, reference))} of {len(reference)} worlds already built", flush=True)
    try:
        t0 = time.perf_counter()
        worlds.build_missing(settings, reference, progress=print)
        built = time.perf_counter() - t0
        print(f"{len(reference)} worlds built in {built:.0f} s (budget {BUILD_BUDGET_S} s)", flush=True)
        t0 = time.perf_counter()
        reports = validate_reference(settings, args.version, reference=reference)
        validated = time.perf_counter() - t0
    finally:
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
    for world, report in reports:
        print(f"  {world.label()}: {report.summary()}")
    version = reports[0][1].version
    print(f"{version} validated in {len(reports)} worlds in {validated:.0f} s (budget {VALIDATE_BUDGET_S} s)")
    over = built > BUILD_BUDGET_S or validated > VALIDATE_BUDGET_S
    return 1 if over or any(r.problems for _, r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
