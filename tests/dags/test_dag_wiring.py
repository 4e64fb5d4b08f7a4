"""DAG wiring that needs no database cluster: every DAG file parses fast in a fresh process without
importing GX, MLflow or dbt; agent_eval's trigger form is generated from RunConfig and opens
submittable; tracking the same run twice (a retried task) leaves one MLflow parent run."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from evalpkg import orchestration
from evalpkg.agent.trajectory import Trajectory
from evalpkg.errors import ConfigError
from evalpkg.runconfig import RunConfig
from evalpkg.settings import PROJECT_ROOT

DAG_FILES = sorted((PROJECT_ROOT / "dags").glob("*.py"))
HEAVY = ("great_expectations", "mlflow", "dbt")

# Runs in a fresh interpreter, as a dag-processor would: Airflow is loaded first (the processor has it
# already), then one DAG file is parsed; prints what that took, what it imported, and each DAG's
# params as the API serializes them for the trigger form.
PARSE_ONE_FILE = """
import json, sys, time
import airflow.sdk
from airflow.dag_processing.dagbag import DagBag
started = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "parse_s": time.perf_counter() - started,
    "import_errors": {k: str(v)[-500:] for k, v in bag.import_errors.items()},
    "heavy_modules": sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2:])),
    "params": {d: {k: bag.get_dag(d).params.get_param(k).serialize() for k in bag.get_dag(d).params} for d in bag.dag_ids},
}))
"""


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A throwaway Airflow home with a migrated metadata DB (Cosmos keeps its dbt-ls cache in a Variable)."""
    home = tmp_path_factory.mktemp("airflow-parse")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__COSMOS__ENABLE_TELEMETRY": "False",
        "EVALPKG_STATE_DIR": str(home / "evalpkg-state"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), "db", "migrate"], check=True, capture_output=True, env=env
    )
    return env


@pytest.fixture(scope="module")
def parse(airflow_env: dict[str, str]) -> Callable[[Path], dict[str, Any]]:
    def run(path: Path) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-c", PARSE_ONE_FILE, str(path), *HEAVY],
            capture_output=True,
            text=True,
            env=airflow_env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["import_errors"] == {}, result["import_errors"]
        return result

    return run


@pytest.mark.parametrize("path", DAG_FILES, ids=[p.stem for p in DAG_FILES])
def test_dag_file_parses_fast_without_heavy_imports(path: Path, parse: Callable[[Path], dict[str, Any]]) -> None:
    first = parse(path)
    # Cosmos renders ehr_deid_sync's dbt project with `dbt ls` (dbt in-process) when its cache is cold;
    # the cache lives in the metadata DB, so every later parse (each task's start) finds it warm.
    warm = parse(path) if path.stem == "ehr_deid_sync" else first
    print(f"\n{path.name}: parse {first['parse_s']:.2f} s, warm {warm['parse_s']:.2f} s, {first['heavy_modules']}")
    assert not {"great_expectations", "mlflow"} & set(first["heavy_modules"]), first["heavy_modules"]
    assert warm["heavy_modules"] == [], warm["heavy_modules"]
    assert warm["parse_s"] < 5, warm["parse_s"]  # measured here: 0.2-0.7 s; was 2.9-3.4 s with GX imported


def test_trigger_form_opens_submittable_and_its_defaults_are_a_gold_run(
    parse: Callable[[Path], dict[str, Any]],
) -> None:
    params = parse(PROJECT_ROOT / "dags" / "agent_eval.py")["params"]["agent_eval"]
    assert set(params) == set(orchestration.eval_params())
    for name, param in params.items():
        # what the API and the form check: the value against the Param's JSON schema ...
        jsonschema.validate(param["value"], param["schema"], format_checker=jsonschema.FormatChecker())
        # ... and that a typed field without "null" in its type is filled (else Trigger stays disabled)
        types = param["schema"]["type"] if isinstance(param["schema"]["type"], list) else [param["schema"]["type"]]
        if "null" not in types:
            assert param["value"] not in (None, ""), name
    for name in ("endpoint", "testset_version"):  # empty means "the default"
        assert "null" in params[name]["schema"]["type"] and params[name]["value"] is None, name
    # the limit may be emptied (the whole release) but opens on a run of minutes, not one click from all of it
    assert "null" in params["limit"]["schema"]["type"] and params["limit"]["value"] == orchestration.FORM_LIMIT
    config = orchestration.run_config_from_params({k: p["value"] for k, p in params.items()})
    # otherwise the form's defaults are RunConfig's own: the gold-replay self-test
    assert config == RunConfig(limit=orchestration.FORM_LIMIT) and config.agent == "gold"


FORM = {k: schema["default"] for k, schema in orchestration.eval_params().items()}


@pytest.mark.parametrize(
    ("why", "params", "manual", "pinned", "limit"),
    [
        ("a person triggers the form as it opens: a run of minutes", FORM, True, None, orchestration.FORM_LIMIT),
        ("a person empties the limit: the whole release", FORM | {"limit": None}, True, None, None),
        ("a new release starts it (no person): the whole release", FORM, False, None, None),
        ("a new snapshot with a pinned limit: the pinned one", FORM, False, {"limit": 2}, 2),
        ("a person's limit under a pinned one: the pinned one", FORM | {"limit": 5}, True, {"limit": 2}, 2),
    ],
)
def test_who_started_a_run_decides_its_limit(
    why: str, params: dict[str, Any], manual: bool, pinned: dict[str, Any] | None, limit: int | None
) -> None:
    assert orchestration.eval_config(params, manual=manual, pinned=pinned).limit == limit, why


def test_params_come_from_run_config_not_from_the_dag_file() -> None:
    generated = orchestration.eval_params()
    exposed = {n for n, f in RunConfig.model_fields.items() if not f.exclude and n != "format_version"}
    assert set(generated) == exposed | set(orchestration.RUN_OPTIONS)
    assert "api_key" not in generated  # secret: never in a DAG run's conf
    for name, schema in generated.items():
        if name in RunConfig.model_fields and name != "limit":  # the form's limit: FORM_LIMIT, checked above
            assert schema.get("default") == RunConfig.model_fields[name].get_default(call_default_factory=True)
    tree = ast.parse((PROJECT_ROOT / "dags" / "agent_eval.py").read_text())
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not literals & set(RunConfig.model_fields), literals & set(RunConfig.model_fields)
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Name) and call.func.id == "Param":  # only Param(**generated schema)
            assert not call.args and [k.arg for k in call.keywords] == [None], ast.unparse(call)


def test_trigger_form_groups_its_fields_in_sections(
    parse: Callable[[Path], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    params = parse(PROJECT_ROOT / "dags" / "agent_eval.py")["params"]["agent_eval"]
    sections = [param["schema"]["section"] for param in params.values()]
    # what to evaluate opens the form; each section's fields stand together, in FORM_SECTIONS' order
    assert list(dict.fromkeys(sections)) == list(orchestration.FORM_SECTIONS)
    assert sections == sorted(sections, key=list(orchestration.FORM_SECTIONS).index)
    assert params["agent"]["schema"]["section"] == params["limit"]["schema"]["section"] == "What to evaluate"
    # a field nobody placed is refused by name, not dropped from the form or listed at random
    unplaced = {k: tuple(n for n in names if n != "max_traces") for k, names in orchestration.FORM_SECTIONS.items()}
    monkeypatch.setattr(orchestration, "FORM_SECTIONS", unplaced)
    with pytest.raises(ConfigError, match="no section for max_traces"):
        orchestration.eval_params()


def test_agent_choices_are_exactly_what_run_config_accepts() -> None:
    choices = orchestration.eval_params()["agent"]["enum"]
    for agent in choices:  # with the state toolset, which perturb:dropped_slot needs and the others allow
        RunConfig(agent=agent, endpoint="http://127.0.0.1:1/v1", toolset="emr-v1+state")
    for bad in ("drop table", "perturb:", "perturb:nonsense", "GOLD"):
        assert bad not in choices
        with pytest.raises(ValueError):
            RunConfig(agent=bad)


def _trajectory(n: int) -> Trajectory:
    return Trajectory(
        instance_id=f"i{n}",
        task_id=f"t{n}",
        agent="gold",
        language="zh",
        complexity="plain",
        question="q",
        started_at="2026-01-01T00:00:00+00:00",
        ended_at="2026-01-01T00:00:01+00:00",
    )


def test_tracking_a_run_again_reuses_its_parent_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    from evalpkg.pipeline import tracking

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "unset below")
    monkeypatch.delenv("MLFLOW_DISABLE_TELEMETRY")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    trajectories = [_trajectory(n) for n in range(3)]

    def track(run_id: str) -> str:
        table = {"overall": {"instances": 3.0, "accuracy": 1.0}}
        return tracking.log_run(
            uri, run_id, RunConfig(), "v2", "snap", table, [], {0: ["i0", "i1"], 1: ["i2"]}, trajectories, []
        )

    log_trace = tracking._log_trace
    calls = []

    def dies_on_the_second_trace(*args: Any) -> None:  # the first attempt fails half-way, like a killed task
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("worker lost")
        log_trace(*args)

    monkeypatch.setattr(tracking, "_log_trace", dies_on_the_second_trace)
    with pytest.raises(RuntimeError):
        track("eval-20260101-000000-abcdef")
    monkeypatch.setattr(tracking, "_log_trace", log_trace)
    parent = track("eval-20260101-000000-abcdef")  # the retry
    assert track("eval-20260101-000000-abcdef") == parent  # and a re-score (`evalpkg score RUN`)
    track("other-run")
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true"

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name(tracking.EXPERIMENT)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], "tags.`evalpkg.run_id` = 'eval-20260101-000000-abcdef'")
    parents = [r for r in runs if tracking.PARENT_TAG not in r.data.tags]
    children = [r for r in runs if r.data.tags.get(tracking.PARENT_TAG) == parent]
    assert [p.info.run_id for p in parents] == [parent] and parents[0].info.status == "FINISHED"
    assert sorted(c.data.tags[tracking.SHARD_TAG] for c in children) == ["0", "1"]
    assert len(runs) == 3
    traces = client.search_traces(locations=[experiment.experiment_id], run_id=parent, include_spans=False)
    assert len(traces) == len(trajectories)  # the failed attempt's trace was replaced, not kept beside


pytestmark = pytest.mark.server  # Airflow, dbt or the CLI starting its own services: not in --quick
