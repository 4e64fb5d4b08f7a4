"""What the Airflow DAGs call: JSON-in, JSON-out wrappers over evalpkg, so DAG files stay wiring
and nothing here imports Airflow."""

from __future__ import annotations

import copy
import logging
from datetime import date, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalpkg.errors import ConfigError
from evalpkg.settings import get_settings

if TYPE_CHECKING:
    from evalpkg.runconfig import RunConfig

# What the agent_eval DAG offers beside RunConfig's fields: how the run is carried out, not what it
# measures. Each is a JSON schema with its default, like the fields eval_params() generates.
# (The model worker is RunConfig's own `worker` field: each shard starts it in execute_shard.)
RUN_OPTIONS: dict[str, dict[str, Any]] = {
    "track": {"default": True, "type": "boolean", "title": "Track", "description": "log the run to MLflow"},
}

# The form's limit: a person who triggers agent_eval gets a run of minutes (empty: the whole release). A run
# that an event starts (a new release, a new snapshot) has no person filling the form: it evaluates it all.
FORM_LIMIT = 20  # tasks: 120 instances in the default languages and wordings

# The trigger form's sections, in the order a person fills them in: what is evaluated, how the agent works,
# how it is scored and logged, and the run's scale and limits (Airflow renders each as its own group).
FORM_SECTIONS: dict[str, tuple[str, ...]] = {
    "What to evaluate": (
        "name", "agent", "model", "endpoint", "worker", "model_path", "quantization",
        "testset_version", "languages", "complexities", "limit", "repeats", "seed",
    ),
    "How the agent works": (
        "strategy", "toolset", "prompt_version", "disabled_prompt_rules", "native_tools", "user_simulator",
        "temperature", "max_tokens", "max_steps", "max_calls_per_tool", "max_calls_total",
        "time_confirmation", "supplementary_schema", "schema_hint", "schema_retrieval",
    ),
    "Scoring and tracking": ("reference_worlds", "judge_endpoint", "judge_model", "track", "max_traces"),
    "Scale and limits": (
        "shards", "concurrency", "max_in_flight", "instance_timeout_s", "sql_timeout_ms",
        "max_result_bytes", "max_row_bytes", "eval_db_pool", "results_db_pool",
    ),
}  # fmt: skip


def sync_prepare() -> None:
    """Step 1 of the sync (sync/runner.py): bootstrap and fresh build schemas; the DAG's dbt tasks write
    there, never to what agents query."""
    from evalpkg.sync.runner import begin_build

    begin_build(get_settings())


def sync_freshness() -> None:
    from evalpkg.sync.dbt import run_dbt

    run_dbt(get_settings(), "source freshness")


def sync_unit_tests() -> list[str]:
    """The dbt unit tests (de-identification on fixed rows), which Cosmos renders no task for; the
    names of those that passed. They read the column types of their models' parents, so they run once
    the dbt tasks have built staging."""
    from evalpkg.sync.dbt import run_dbt

    return [r.name for r in run_dbt(get_settings(), "test", "--select", "test_type:unit", build=True)]


def sync_validate() -> str:
    """Step 3: statistics and the GX suite on the build, before anything is published."""
    from evalpkg.sync.runner import check_build

    return check_build(get_settings()).summary()


def sync_publish() -> None:
    """Step 4: the validated build becomes what agents query, in one transaction."""
    from evalpkg.sync.runner import publish_build

    publish_build(get_settings())


def dbt_env() -> dict[str, str]:
    """The dbt tasks' profile: marts go to the build schemas that sync_publish swaps in. No
    DBT_TARGET_PATH / DBT_LOG_PATH: Cosmos runs each dbt command (its `dbt ls` too) in a temporary
    copy of the project that holds target/ and logs/, never the checkout, and reads its artifacts
    (partial_parse.msgpack for its cache, compiled SQL) there; one shared path would also have
    concurrent tasks overwrite each other's artifacts."""
    from evalpkg.sync.dbt import profile_env

    return profile_env(get_settings(), build=True)


def eval_params() -> dict[str, dict[str, Any]]:
    """The agent_eval trigger form, one JSON schema per field with its default: RunConfig's own fields
    (from its JSON schema; none that is secret or constant), then RUN_OPTIONS. A field whose default
    is None (empty means "use the default") accepts null, so the form can be submitted as it opens."""
    from evalpkg.runconfig import RunConfig

    schema = RunConfig.model_json_schema()
    definitions = schema.get("$defs", {})
    params: dict[str, dict[str, Any]] = {}
    for name, field in RunConfig.model_fields.items():
        prop = schema["properties"].get(name)
        if prop is None or field.exclude or "const" in prop:
            continue
        params[name] = _nullable_as_type_list(_inline_refs(prop, definitions))
    params["agent"].setdefault("enum", _agent_choices())
    params["limit"]["default"] = FORM_LIMIT
    params["limit"]["description"] = (
        f"a sample of N tasks, stratified over task type x difficulty: {FORM_LIMIT} for a run of minutes, "
        "empty for the whole release (a release or snapshot event evaluates it whole)"
    )
    if clash := sorted(params.keys() & RUN_OPTIONS.keys()):
        raise ConfigError(f"RunConfig now has {', '.join(clash)}: drop it from orchestration.RUN_OPTIONS")
    return _in_sections(params | copy.deepcopy(RUN_OPTIONS))


def _in_sections(params: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The fields in FORM_SECTIONS' order, each schema naming its section (the form groups by it)."""
    placed = [name for names in FORM_SECTIONS.values() for name in names]
    if missing := sorted(params.keys() - set(placed)):
        raise ConfigError(f"the trigger form has no section for {', '.join(missing)}: add it to FORM_SECTIONS")
    if unknown := sorted(set(placed) - params.keys()):
        raise ConfigError(f"FORM_SECTIONS names {', '.join(unknown)}, which is no field of the form")
    return {name: params[name] | {"section": section} for section, names in FORM_SECTIONS.items() for name in names}


def _inline_refs(schema: Any, definitions: dict[str, Any]) -> Any:
    """Each Param carries a standalone schema: replace {"$ref": "#/$defs/X"} by X itself."""
    if isinstance(schema, list):
        return [_inline_refs(s, definitions) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = definitions[schema["$ref"].rsplit("/", 1)[-1]]
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return _inline_refs({**target, **rest}, definitions)
    return {k: _inline_refs(v, definitions) for k, v in schema.items()}


def _nullable_as_type_list(prop: dict[str, Any]) -> dict[str, Any]:
    """pydantic writes `X | None` as anyOf [X, null]; Airflow's form reads `type` (a field is required
    unless its type list holds "null"), so that becomes X with type ["null", X's type]."""
    options = prop.get("anyOf")
    if not options or {"type": "null"} not in options or len(options) != 2:
        return prop
    (other,) = (o for o in options if o != {"type": "null"})
    if not isinstance(other.get("type"), str):
        return prop
    merged: dict[str, Any] = {k: v for k, v in prop.items() if k != "anyOf"} | other
    merged["type"] = ["null", other["type"]]
    return merged


def _agent_choices() -> list[str]:
    """RunConfig checks `agent` in a validator, which its JSON schema cannot show: the same choices,
    built from the same PERTURBATIONS (a test checks RunConfig accepts each one)."""
    from evalpkg.runconfig import PERTURBATIONS

    return ["gold", "openai", *(f"perturb:{kind}" for kind in PERTURBATIONS)]


def run_config_from_params(params: dict[str, Any]) -> RunConfig:
    """The run a DAG's params describe: RunConfig's fields, empty ones left to RunConfig's defaults
    (a worker sets agent and model itself, as on the command line)."""
    from evalpkg.runconfig import RunConfig

    keys = set(RunConfig.model_fields) - {"format_version"}
    values = {k: v for k, v in params.items() if k in keys and v not in (None, "")}
    return RunConfig.model_validate(values)


def eval_config(params: dict[str, Any], *, manual: bool = True, pinned: dict[str, Any] | None = None) -> RunConfig:
    """A DAG run's evaluation: the form's values; a run no person triggered (manual False) without the
    form's quick-run limit; the pinned fields over both."""
    return run_config_from_params(dict(params) | ({} if manual else {"limit": None}) | (pinned or {}))


def eval_plan(params: dict[str, Any], *, manual: bool = True, pinned: dict[str, Any] | None = None) -> str:
    from evalpkg.pipeline.run import plan_run

    return plan_run(get_settings(), eval_config(params, manual=manual, pinned=pinned))


def eval_shards(run_id: str) -> list[int]:
    from evalpkg.pipeline import store

    config, *_ = store.load_run(get_settings(), run_id)
    return list(range(config.shards))


def eval_shard(run_id: str, shard: int) -> dict[str, Any]:
    """One shard, resumable: a run with a worker starts, uses and always stops it inside execute_shard."""
    from evalpkg.pipeline.execute import execute_shard

    r = execute_shard(get_settings(), run_id, shard)
    return {
        "shard": r.shard,
        "recorded": r.recorded,
        "skipped": r.skipped,
        "planned": r.planned,
        "worker_start_s": r.worker_start_s,
        "served": r.served,
    }


def eval_score_and_log(run_id: str, track: bool = True) -> dict[str, Any]:
    from evalpkg.pipeline.run import finish_run

    finished = finish_run(get_settings(), run_id, track=track)  # includes the GX suite on the outputs
    if finished.mlflow_run_url:  # the task log's way to the run (an INFO line)
        logging.getLogger(__name__).info("MLflow run: %s", finished.mlflow_run_url)
        logging.getLogger(__name__).info("compare runs in MLflow: %s", finished.mlflow_compare_url)
    return {
        "run_id": run_id,
        "accuracy": finished.scored.table["overall"]["accuracy"],
        "report": str(finished.report),
        "mlflow_run_id": finished.mlflow_run_id,
        "mlflow_run_url": finished.mlflow_run_url,
        "validation": finished.scored.validation.summary(),
    }


def previous_month(day: date) -> str:
    first = day.replace(day=1) - timedelta(days=1)
    return f"{first.year}-{first.month:02d}"


def testset_refresh(month: str, auto_approve: bool = False) -> list[str]:
    """Mine `month` as `evalpkg testset refresh --month` does by default (the same function, the same
    default): each candidate checked in the reference worlds before review; the summary goes to the task log."""
    from evalpkg.testset.refresh import mine

    report = mine(get_settings(), month, auto_approve=auto_approve, progress=print)
    for line in report.details():
        print(line)
    return report.added


def testset_release() -> str | None:
    """The approved candidates that are ready and hold in every reference world, released; each one held
    back or refused is printed (the task log) with its reason and stays in the review queue."""
    from evalpkg.testset.refresh import release_queue

    out = release_queue(get_settings(), progress=print)
    return out.release.version if out.release else None


def testset_validate(version: str | None = None) -> str:
    from evalpkg.testset.validate import validate_or_raise

    return validate_or_raise(get_settings(), version).summary()


def quantize(
    model_dir: str,
    output_dir: str,
    method: str = "llm-compressor",
    testset_version: str | None = None,
    samples: int = 256,
) -> dict[str, Any]:
    """The model_quantize task: the checkpoint and its manifest (what the task returns to XCom)."""
    from evalpkg.serving.quantize import quantize as run

    manifest = run(
        Path(model_dir),
        Path(output_dir),
        method,  # type: ignore[arg-type]
        tasks_dir=get_settings().tasks_dir,
        testset_version=testset_version,
        samples=samples,
    )
    return manifest.model_dump()
