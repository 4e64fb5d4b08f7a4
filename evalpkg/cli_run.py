"""`evalpkg run | score | report | compare`: the evaluation pipeline from the command line."""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import typer

from evalpkg.cli_options import with_run_options
from evalpkg.errors import ConfigError, DataError, ServiceError, UsageError
from evalpkg.progress import to_stderr
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings, get_settings

if TYPE_CHECKING:
    from evalpkg.pipeline.execute import ShardReport
    from evalpkg.pipeline.score import InstanceScore


PROBE_TIMEOUT_S = 5


def worker_spec(config: RunConfig) -> None:
    """A run with a worker: its server software is installed here and its model is where it says.
    Each shard starts (and always stops) the server itself, so nothing is started here."""
    if config.worker != "none":
        from evalpkg.serving.worker import preflight

        preflight(config)


def log_worker(r: ShardReport) -> None:
    """What a shard's worker served and how long it took to become healthy."""
    if r.worker_start_s is None or not r.served:
        return
    keys = ("model_path", "quantization", "server_version", "gpu")
    served = ", ".join(f"{k} {r.served[k]}" for k in keys if k in r.served)
    to_stderr(f"shard {r.shard}: {r.served['worker']} worker up in {r.worker_start_s:.1f}s ({served}); {r.worker_log}")


def unreachable(url: str) -> str | None:
    """Why an HTTP server does not answer at `url`, or None when it answers (with any status)."""
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S):
            return None
    except urllib.error.HTTPError:
        return None  # it answered: authentication and routes are someone else's business
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return str(getattr(reason, "strerror", None) or reason)


def check_endpoint(config: RunConfig) -> None:
    """The OpenAI-compatible endpoints a run calls (the agent's, the judge's) must answer before it is planned."""
    endpoints = [("--endpoint", config.endpoint if config.agent == "openai" else None)]
    for option, url in [*endpoints, ("--judge-endpoint", config.judge_endpoint)]:
        if not url:
            continue
        if urlsplit(url).scheme not in ("http", "https"):
            raise UsageError(f"{option}: expected an http(s) URL like http://host:8000/v1, got {url!r}")
        if why := unreachable(url.rstrip("/") + "/models"):
            raise ServiceError(f"{option}: cannot reach {url}: {why}")


def check_tracking(settings: Settings, skip: str) -> None:
    """An MLflow server must answer before a run or its scores are written, not after."""
    uri = settings.tracking_uri
    if urlsplit(uri).scheme in ("http", "https") and (why := unreachable(uri.rstrip("/") + "/health")):
        raise ServiceError(f"MLflow at {uri} is unreachable ({why}): start it with `evalpkg up` or {skip}")


def check_recorded(settings: Settings, run_id: str) -> None:
    """Scoring needs every planned instance recorded; say which shard is missing instead of failing the GX suite."""
    from evalpkg.pipeline import store

    _, _, _, instances = store.load_run(settings, run_id)
    done = store.recorded_ids(settings, run_id)
    missing = sorted({i.shard for i in instances if i.instance_id not in done})
    if missing:
        raise DataError(
            f"run {run_id}: {len(instances) - len(done)} of {len(instances)} planned instances are not recorded; "
            f"execute them with `evalpkg run-shard {run_id} --shard {missing[0]}`"
        )


def check_state_dir(settings: Settings) -> None:
    """Runs write under the state directory: fail before planning if they could not."""
    from evalpkg.pipeline import store

    path = store.run_dir(settings, "x").parent
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"EVALPKG_STATE_DIR: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"EVALPKG_STATE_DIR: {existing} is not writable")


def compare_line(group: str, measure: str, *cells: object) -> str:
    """One row of `evalpkg compare`: cells without spaces, so the row splits on whitespace."""
    widths = (6, 8, 8, 8, 18, 5, 5, 10)
    return f"{group:<28}{measure:<36}" + "".join(f"{c!s:>{w}}" for c, w in zip(cells, widths, strict=True))


def repeats_line(group: str, m: dict[str, float]) -> str | None:
    """best-of-k, pass^k and consistency with their 95% CIs over tasks; None for a run of one repeat."""
    if m.get("repeats", 1) < 2:
        return None
    k = int(m["repeats"])
    parts = ((f"best-of-{k}", "best_of_k"), (f"pass^{k}", "pass_all_k"), ("consistency", "consistency"))
    return f"{group}: " + ", ".join(
        f"{label} {m[key]:.1%} (95% CI {m[key + '_ci_low']:.1%}-{m[key + '_ci_high']:.1%})" for label, key in parts
    )


def run(config: RunConfig, no_track: Annotated[bool, typer.Option("--no-track", help="skip MLflow")] = False) -> None:
    """Run all five stages (normalize, execute, record, score, cluster); validate, track, report.
    Every RunConfig field is an option; `--config` gives any of them as JSON (or a JSON file)."""
    from tqdm import tqdm

    from evalpkg.pipeline.run import run_all

    settings = get_settings()
    worker_spec(config)
    check_endpoint(config)
    if not no_track:
        check_tracking(settings, "pass --no-track")
    check_state_dir(settings)
    bar = tqdm(total=0, unit="instance", desc="execute", disable=None)

    def tick(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    result = run_all(settings, config, progress=to_stderr, shard_progress=tick, track=not no_track)
    bar.close()
    for r in result["shards"]:
        log_worker(r)
    _print_run(result)


def score(run_id: str, track: Annotated[bool, typer.Option(help="log the new scores to MLflow")] = False) -> None:
    """Re-score a finished run from its recorded trajectories (no model is called)."""
    from evalpkg.pipeline.run import finish_run

    settings = get_settings()
    check_recorded(settings, run_id)
    if track:
        check_tracking(settings, "drop --track")
    scored = finish_run(settings, run_id, track=track, progress=to_stderr).scored
    o = scored.table["overall"]
    if line := repeats_line(f"{run_id} overall", o):
        typer.echo(line)
    typer.echo(f"{run_id}: accuracy {o['accuracy']:.1%} over {o['instances']} instances; {scored.validation.summary()}")


def report(run_id: str) -> None:
    """Write the HTML report of a scored run and print its path."""
    from evalpkg.pipeline.run import finish_run

    settings = get_settings()
    check_recorded(settings, run_id)
    typer.echo(finish_run(settings, run_id, track=False).report)


def compare(
    run_a: str,
    run_b: str,
    by_type: Annotated[
        str, typer.Option("--by-type", help="the measure also compared per task type (any compared measure)")
    ] = "accuracy",
) -> None:
    """Paired differences (B - A) of every compared measure, paired by task x language x complexity x
    repeat, with bootstrap CIs over tasks and an exact McNemar test; one measure also per task type."""
    from evalpkg.pipeline.metrics import PAIRED_MEASURES, pairs
    from evalpkg.pipeline.run import score_run

    if by_type not in PAIRED_MEASURES:
        raise UsageError(f"--by-type: expected one of {', '.join(PAIRED_MEASURES)}, got {by_type!r}")
    settings = get_settings()
    for run_id in (run_a, run_b):  # both must be complete before either is scored
        check_recorded(settings, run_id)
    a, b = score_run(settings, run_a, save=False).scores, score_run(settings, run_b, save=False).scores
    matched = pairs(a, b)
    if not matched:
        raise DataError(
            f"runs {run_a} and {run_b} share no instance (task, language, complexity, repeat): nothing to pair"
        )
    typer.echo(
        f"A {run_a}, B {run_b}: {len(matched)} pairs over {len({x.task_id for x, _ in matched})} tasks; "
        "B-A with 95% CIs resampling tasks; p: exact McNemar on the pairs where A or B is higher"
    )
    _print_pairs(a, b, by_type)


def run_shard(run_id: str, shard: Annotated[int, typer.Option(min=0)]) -> None:
    """Execute one shard of a planned run (what each Airflow shard task calls); resumable."""
    from evalpkg.pipeline import store
    from evalpkg.pipeline.execute import execute_shard

    settings = get_settings()
    config, *_ = store.load_run(settings, run_id)
    if shard >= config.shards:
        raise UsageError(f"--shard: run {run_id} has shards 0..{config.shards - 1}, got {shard}")
    r = execute_shard(settings, run_id, shard)
    log_worker(r)
    to_stderr(
        f"shard {r.shard}: {r.recorded} recorded, {r.skipped} recorded before, {r.planned} planned, {r.seconds:.1f}s"
    )


def _print_run(result: dict[str, Any]) -> None:
    """What a run says when it ends: stage times, accuracy with its CI, semantic accuracy, follow-up
    dialogues, the MLflow run and the report."""
    traces = f" (traces sent over {result['traces_s']:.1f} s from grading on)" if result["traces_s"] else ""
    to_stderr("seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in result["seconds"].items()) + traces)
    o = result["overall"]
    for group, m in result["table"].items():  # per task type, then overall, next to the accuracy line
        if group.startswith("type.") and (line := repeats_line(group, m)):
            to_stderr(line)
    if line := repeats_line("overall", o):
        to_stderr(line)
    semantic = (
        f"; semantic accuracy {o['semantic_accuracy']:.1%} (95% CI {o['semantic_accuracy_ci_low']:.1%}-"
        f"{o['semantic_accuracy_ci_high']:.1%}; {int(o['coincidental_matches'])} coincidental matches: right on "
        "this snapshot only)"
        if "semantic_accuracy" in o
        else ""
    )
    to_stderr(
        f"accuracy {o['accuracy']:.1%} (95% CI {o['accuracy_ci_low']:.1%}-{o['accuracy_ci_high']:.1%}) over "
        f"{o['instances']} instances{semantic}; {len(result['clusters'])} error clusters"
    )
    if "dialogue_accuracy" in o:  # follow-up dialogues: each turn on its own, and the dialogue whole
        turns = ", ".join(f"turn {k[5:-9]} {v:.1%}" for k, v in o.items() if re.fullmatch(r"turn_\d+_accuracy", k))
        to_stderr(
            f"follow-up dialogues: {int(o['dialogues'])}; dialogue accuracy {o['dialogue_accuracy']:.1%}, "
            f"turn accuracy {o['turn_accuracy']:.1%} ({turns})"
        )
    if result["mlflow_run_url"]:
        to_stderr(f"MLflow run: {result['mlflow_run_url']}")
        to_stderr(f"compare runs in MLflow: {result['mlflow_compare_url']}")
    typer.echo(f"report: {result['report']}")


def _print_pairs(a: list[InstanceScore], b: list[InstanceScore], by_type: str) -> None:
    """The paired table: every measure overall, `by_type` per task type."""
    from evalpkg.pipeline.metrics import paired_groups

    typer.echo(compare_line("group", "measure", "n", "A", "B", "B-A", "95% CI", "A>B", "B>A", "p"))
    for group, measures in paired_groups(a, b).items():
        for name, m in measures.items():
            if group == "overall" or name == by_type:
                typer.echo(
                    compare_line(
                        group,
                        name,
                        m["instances"],
                        f"{m['a']:.3f}",
                        f"{m['b']:.3f}",
                        f"{m['difference']:+.3f}",
                        f"[{m['ci_low']:+.3f},{m['ci_high']:+.3f}]",
                        m["a_better"],
                        m["b_better"],
                        f"{m['mcnemar_p']:.3g}",
                    )
                )


def leaderboard(
    runs: Annotated[list[str] | None, typer.Argument(help="run ids; none: every scored run")] = None,
    name: Annotated[str | None, typer.Option(help="only the runs made with this --name")] = None,
) -> None:
    """Scored runs side by side (model, agent design, test set and snapshot, accuracy and semantic accuracy
    with CIs, per task type, tool calls, latency), best first; also written as runs/leaderboard.html.
    A run on another test set or snapshot than the first is marked, not mixed."""
    from evalpkg.pipeline import store
    from evalpkg.pipeline.leaderboard import entries, lines, write_html

    settings = get_settings()
    if runs and name is not None:
        raise UsageError("--name: give run ids or --name, not both")
    run_ids = runs or store.scored_runs(settings, name)
    if not run_ids:
        raise DataError("no scored run" + (f" named {name!r}" if name else "") + " in the results store")
    rows = entries(settings, run_ids)
    for line in lines(rows):
        typer.echo(line)
    to_stderr(f"leaderboard: {write_html(settings.state_dir / 'runs' / 'leaderboard.html', rows)}")


def register(app: typer.Typer) -> None:
    app.command()(with_run_options(run))
    for command in (score, report, compare, leaderboard):
        app.command()(command)
    app.command("run-shard")(run_shard)
