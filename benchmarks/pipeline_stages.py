"""Where a full evaluation spends its time, measured in one run on a synced eval DB with MLflow up
(scripts/demo, or `evalpkg up`): the gold agent over every variant of the latest release with 3
repeats (5,778 instances for v6), every stage's seconds and their sum, then the traces counted in
MLflow through its API and the report opened in headless Chromium.

    .venv/bin/python benchmarks/pipeline_stages.py [--repeats 3] [--testset-version v6] [--no-reference-worlds]

Targets (issue 24): every stage but execute within 2 minutes on 2 cores, tracking within 30 s, every
trace in MLflow, the report's first screen under 1 MB and open in under 3 s.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalpkg.runconfig import RunConfig
from evalpkg.settings import get_settings


def traces_in_mlflow(tracking_uri: str, mlflow_run_id: str) -> tuple[int, str]:
    """The traces MLflow holds for the run, counted through its API, and how they went there (the run's
    tag: "otlp" in bulk, "span api" a trace at a time where the server has no OTLP route)."""
    import mlflow

    from evalpkg.pipeline.tracking import EXPORT_TAG, count_traces

    mlflow.set_tracking_uri(tracking_uri)
    client = mlflow.MlflowClient()
    run = client.get_run(mlflow_run_id)
    return count_traces(client, run.info.experiment_id, mlflow_run_id), run.data.tags.get(EXPORT_TAG, "?")


def first_screen_bytes(report: Path) -> int:
    """The page: it loads nothing else until a row is opened (tests/pipeline/test_report.py checks that)."""
    return report.stat().st_size


def open_seconds(report: Path) -> float | None:
    """Wall time of headless Chromium starting, loading the page and printing its DOM (None: no Chromium);
    an upper bound of the page's own load time."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return None
    started = time.perf_counter()
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", report.as_uri()],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--testset-version", help="the release to run (default: the latest; v6 has the issue's 5,778)")
    parser.add_argument("--no-reference-worlds", action="store_true", help="skip scoring in the reference worlds")
    args = parser.parse_args()

    from evalpkg.pipeline.run import run_all

    settings = get_settings()
    config = RunConfig(
        name="stages",
        agent="gold",
        repeats=args.repeats,
        testset_version=args.testset_version,
        reference_worlds=not args.no_reference_worlds,
    )
    started = time.perf_counter()
    result = run_all(settings, config, progress=lambda m: print(f"  {m}", file=sys.stderr))
    wall = time.perf_counter() - started
    seconds = result["seconds"]
    instances = int(result["overall"]["instances"])
    print(f"{instances} instances, {wall:.1f} s wall")
    for stage, s in seconds.items():
        print(f"  {stage:<10} {s:8.1f} s")
    # tracking's wall time runs beside the report's: count it, not the report, where they overlap; record
    # (thread-seconds inside execute) is counted in full, an upper bound of what it adds
    bookkeeping = sum(s for k, s in seconds.items() if k not in ("execute", "report"))
    after = wall - seconds["plan"] - seconds["execute"]
    print(f"every stage but execute: {bookkeeping:.1f} s summed, {after:.1f} s wall after execute (target 120 s)")
    held, how = traces_in_mlflow(settings.tracking_uri, result["mlflow_run_id"])
    sent_over = result["traces_s"] or seconds.get("tracking", 0.0)
    rate = f", {held / sent_over:.0f} traces/s" if sent_over else ""
    print(f"traces in MLflow: {held} of {instances} (sent by {how}{rate}; target: all, within 30 s)")
    print(
        f"  tracking added {seconds.get('tracking', 0.0):.1f} s after the other stages; its traces were sent over "
        f"{sent_over:.1f} s from grading on, beside the reference worlds, clustering, GX and the report"
    )
    report = Path(result["report"])
    print(f"report: first screen {first_screen_bytes(report) / 1e6:.2f} MB (target < 1 MB)")
    if (opened := open_seconds(report)) is not None:
        print(f"report opened in headless Chromium in {opened:.2f} s, the browser's start included (target < 3 s)")


if __name__ == "__main__":
    main()
