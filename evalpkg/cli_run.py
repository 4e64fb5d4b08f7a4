"""`evalpkg run | score | report | compare`: the evaluation pipeline from the command line."""

from __future__ import annotations

import contextlib
import json
from typing import Annotated, Any

import typer

from evalpkg.settings import get_settings


def _log(message: str) -> None:
    typer.echo(message, err=True)


def register(app: typer.Typer) -> None:
    @app.command()
    def run(
        agent: Annotated[str, typer.Option(help="gold | openai | perturb:<kind>")] = "gold",
        model: Annotated[str, typer.Option(help="model name sent to the endpoint")] = "gold-replay",
        endpoint: Annotated[str | None, typer.Option(help="OpenAI-compatible base URL (http://host:8000/v1)")] = None,
        api_key: Annotated[str, typer.Option(envvar="EVALPKG_API_KEY", help="endpoint key (never logged)")] = "EMPTY",
        name: Annotated[str, typer.Option(help="run name shown in MLflow")] = "eval",
        testset: Annotated[str | None, typer.Option(help="test-set version; default latest")] = None,
        language: Annotated[list[str] | None, typer.Option(help="zh and/or en (repeatable)")] = None,
        complexity: Annotated[list[str] | None, typer.Option(help="colloquial/plain/technical (repeatable)")] = None,
        repeats: Annotated[int, typer.Option()] = 1,
        shards: Annotated[int, typer.Option()] = 1,
        concurrency: Annotated[int, typer.Option()] = 4,
        limit: Annotated[int | None, typer.Option(help="first N tasks only")] = None,
        temperature: Annotated[float, typer.Option()] = 0.0,
        quantization: Annotated[str, typer.Option()] = "none",
        text_protocol: Annotated[bool, typer.Option(help="model has no native tool calling")] = False,
        config_json: Annotated[str | None, typer.Option("--config", help="RunConfig JSON; options override")] = None,
        no_track: Annotated[bool, typer.Option("--no-track", help="skip MLflow")] = False,
        worker: Annotated[str | None, typer.Option(help="start a model server for this run: cpu (llama.cpp)")] = None,
        max_steps: Annotated[int, typer.Option(help="per-dialogue step limit")] = 12,
    ) -> None:
        """Run all five stages (normalize, execute, record, score, cluster); validate, track, report."""
        from tqdm import tqdm

        from evalpkg.pipeline.config import RunConfig
        from evalpkg.pipeline.run import run_all

        base = json.loads(config_json) if config_json else {}
        overrides: dict[str, Any] = {
            "agent": agent,
            "model": model,
            "endpoint": endpoint,
            "api_key": api_key,
            "name": name,
            "testset_version": testset,
            "repeats": repeats,
            "shards": shards,
            "concurrency": concurrency,
            "limit": limit,
            "temperature": temperature,
            "quantization": quantization,
            "native_tools": not text_protocol,
            "max_steps": max_steps,
        }
        if language:
            overrides["languages"] = language
        if complexity:
            overrides["complexities"] = complexity
        config = RunConfig.model_validate({**base, **overrides})
        bar = tqdm(total=0, unit="instance", desc="execute", disable=None)

        def tick(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()

        settings = get_settings()
        with contextlib.ExitStack() as stack:
            if worker is not None:
                if worker != "cpu":
                    raise typer.BadParameter(f"{worker!r}: only 'cpu' can be started here", param_hint="--worker")
                from evalpkg.serving.worker import llamacpp_spec, running

                spec = stack.enter_context(running(llamacpp_spec(), settings.state_dir / "workers" / "cpu.log"))
                _log(f"CPU model server up at {spec.base_url} ({spec.served_model})")
                config = config.model_copy(
                    update={
                        "agent": "openai",
                        "endpoint": spec.base_url,
                        "model": spec.served_model,
                        "quantization": "gguf-q4_1",
                    }
                )
            result = run_all(settings, config, progress=_log, shard_progress=tick, track=not no_track)
        bar.close()
        o = result["overall"]
        _log(
            f"accuracy {o['accuracy']:.1%} (95% CI {o['accuracy_ci_low']:.1%}-{o['accuracy_ci_high']:.1%}) over "
            f"{o['instances']} instances; {len(result['clusters'])} error clusters"
        )
        if result["mlflow_run_id"]:
            _log(f"MLflow run {result['mlflow_run_id']} at {get_settings().tracking_uri}")
        typer.echo(f"report: {result['report']}")

    @app.command()
    def score(run_id: str, track: Annotated[bool, typer.Option(help="log the new scores to MLflow")] = False) -> None:
        """Re-score a finished run from its recorded trajectories (no model is called)."""
        from evalpkg.pipeline.run import report_run, score_run, track_run

        settings = get_settings()
        scored = score_run(settings, run_id, _log)
        report_run(settings, run_id, scored)
        if track:
            track_run(settings, run_id, scored)
        o = scored.table["overall"]
        typer.echo(
            f"{run_id}: accuracy {o['accuracy']:.1%} over {o['instances']} instances; {scored.validation.summary()}"
        )

    @app.command()
    def report(run_id: str) -> None:
        """Write the HTML report of a scored run and print its path."""
        from evalpkg.pipeline.run import report_run, score_run

        settings = get_settings()
        typer.echo(report_run(settings, run_id, score_run(settings, run_id)))

    @app.command()
    def compare(run_a: str, run_b: str) -> None:
        """Paired differences (B - A) with bootstrap CIs and an exact McNemar test, overall and per type."""
        from evalpkg.pipeline.metrics import paired
        from evalpkg.pipeline.run import score_run

        settings = get_settings()
        a, b = score_run(settings, run_a).scores, score_run(settings, run_b).scores
        groups = [("overall", a, b)] + [
            (f"type.{t}", [s for s in a if s.type == t], [s for s in b if s.type == t])
            for t in sorted({s.type for s in a})
        ]
        typer.echo(f"{'group':<26}{'n':>6}{'A':>8}{'B':>8}{'B-A':>8}{'95% CI':>18}{'p':>8}")
        for label, x, y in groups:
            r = paired(x, y)
            if not r["instances"]:
                continue
            ci = f"[{r['ci_low']:+.1%}, {r['ci_high']:+.1%}]"
            typer.echo(
                f"{label:<26}{r['instances']:>6}{r['accuracy_a']:>8.1%}{r['accuracy_b']:>8.1%}"
                f"{r['difference']:>+8.1%}{ci:>18}{r['mcnemar_p']:>8.3f}"
            )

    @app.command("run-shard")
    def run_shard(run_id: str, shard: Annotated[int, typer.Option()]) -> None:
        """Execute one shard of a planned run (what each Airflow shard task calls); resumable."""
        from evalpkg.pipeline.execute import execute_shard

        r = execute_shard(get_settings(), run_id, shard)
        _log(
            f"shard {r.shard}: {r.recorded} recorded, {r.skipped} recorded before, "
            f"{r.planned} planned, {r.seconds:.1f}s"
        )
