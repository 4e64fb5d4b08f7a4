"""What the Airflow DAGs call: JSON-in, JSON-out wrappers over evalpkg, so DAG files stay wiring
and nothing here imports Airflow."""

from __future__ import annotations

import contextlib
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from evalpkg.settings import get_settings


def sync_prepare() -> None:
    from evalpkg.sync.runner import prepare

    prepare(get_settings())


def sync_freshness() -> None:
    from evalpkg.sync.dbt import run_dbt

    run_dbt(get_settings(), "source freshness")


def sync_validate() -> str:
    from evalpkg.sync.validate import validate_eval_db

    return validate_eval_db(get_settings()).summary()


def dbt_env() -> dict[str, str]:
    from evalpkg.sync.dbt import profile_env

    return profile_env(get_settings())


def eval_plan(params: dict[str, Any]) -> str:
    from evalpkg.pipeline.config import RunConfig
    from evalpkg.pipeline.run import plan_run

    keys = set(RunConfig.model_fields) - {"format_version"}
    values = {k: v for k, v in params.items() if k in keys and v not in (None, "")}
    if params.get("worker") == "cpu":  # the model is whatever the CPU worker serves (validated with it)
        from evalpkg.serving.worker import CPU_MODEL_NAME

        values.update(agent="openai", model=CPU_MODEL_NAME, endpoint="per-shard")
    return plan_run(get_settings(), RunConfig.model_validate(values))


def eval_shards(run_id: str) -> list[int]:
    from evalpkg.pipeline import store

    config, *_ = store.load_run(get_settings(), run_id)
    return list(range(config.shards))


def eval_shard(run_id: str, shard: int, worker: str = "none") -> dict[str, Any]:
    """One shard: start its model worker if asked, run, and always stop the worker."""
    from evalpkg.pipeline.execute import execute_shard

    settings = get_settings()
    with contextlib.ExitStack() as stack:
        endpoint = model = None
        if worker == "cpu":
            from evalpkg.serving.worker import llamacpp_spec, running

            spec = stack.enter_context(
                running(llamacpp_spec(), settings.state_dir / "workers" / f"{run_id}-{shard}.log")
            )
            endpoint, model = spec.base_url, spec.served_model
        r = execute_shard(settings, run_id, shard, endpoint=endpoint, model=model)
    return {"shard": r.shard, "recorded": r.recorded, "skipped": r.skipped, "planned": r.planned}


def eval_score_and_log(run_id: str, track: bool = True) -> dict[str, Any]:
    from evalpkg.pipeline.run import report_run, score_run, track_run

    settings = get_settings()
    scored = score_run(settings, run_id)  # includes the GX suite on the outputs
    report = report_run(settings, run_id, scored)
    mlflow_run = track_run(settings, run_id, scored) if track else None
    return {
        "run_id": run_id,
        "accuracy": scored.table["overall"]["accuracy"],
        "report": str(report),
        "mlflow_run_id": mlflow_run,
        "validation": scored.validation.summary(),
    }


def previous_month(day: date) -> str:
    first = day.replace(day=1) - timedelta(days=1)
    return f"{first.year}-{first.month:02d}"


def testset_refresh(month: str, auto_approve: bool = False) -> list[str]:
    from evalpkg.testset.refresh import refresh

    return refresh(get_settings(), month, auto_approve=auto_approve).added


def testset_release() -> str | None:
    from evalpkg.testset.refresh import release_approved

    rel = release_approved(get_settings())
    return rel.version if rel else None


def testset_validate(version: str | None = None) -> str:
    from evalpkg.testset.validate import validate_or_raise

    return validate_or_raise(get_settings(), version).summary()


def quantize(model_dir: str, output_dir: str, method: str = "autoawq") -> str:
    from evalpkg.serving.quantize import quantize as run

    return str(run(Path(model_dir), Path(output_dir), method))  # type: ignore[arg-type]
