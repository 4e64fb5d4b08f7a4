"""ehr_deid_sync's dbt tasks: the dbt unit tests run (Cosmos renders no task for them), every dbt
invocation runs in the pool `dbt` that scripts/airflow creates, and no dbt invocation, evalpkg's or
Cosmos', writes into the checkout (a read-only DAG bundle forbids it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sync import dbt
from tests.dags.helpers import checkout_files

DBT_POOL = "dbt"
UNIT_TESTS = {  # dbt_project/models/staging/_staging__models.yml
    "test_patient_deid_pseudonym_shift_birth_year_and_age_group",
    "test_visits_take_pseudonyms_and_offset_from_visit_keys",
}
# the tasks outside the Cosmos group that invoke dbt (through evalpkg.sync.dbt.run_dbt)
EVALPKG_DBT_TASKS = {"source_freshness", "unit_tests"}


def _cosmos_tasks(dag: Any) -> list[Any]:
    return [t for t in dag.tasks if t.task_id.startswith("dbt.")]


def _unit_tests_have_a_task(dag: Any) -> None:
    assert "unit_tests" in dag.task_ids
    assert not [t for t in dag.task_ids if any(name in t for name in UNIT_TESTS)]  # Cosmos renders none


def _unit_tests_follow_every_dbt_task(dag: Any) -> None:
    upstream = dag.get_task("unit_tests").get_flat_relative_ids(upstream=True)
    cosmos = {t.task_id for t in _cosmos_tasks(dag)}
    assert len(cosmos) > 20 and not cosmos - upstream, sorted(cosmos - upstream)


def _unit_tests_gate_validate_and_publish(dag: Any) -> None:
    assert "unit_tests" in dag.get_task("validate").upstream_task_ids
    assert "unit_tests" in dag.get_task("publish").get_flat_relative_ids(upstream=True)


def _cosmos_test_tasks_leave_unit_tests_out(dag: Any) -> None:
    tests = [t for t in _cosmos_tasks(dag) if type(t).__name__.startswith("DbtTest")]
    assert len(tests) > 5
    for t in tests:
        assert "test_type:unit" in str(t.exclude).split(), (t.task_id, t.exclude)


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(_unit_tests_have_a_task, id="cosmos-renders-no-unit-test-so-a-task-runs-them"),
        pytest.param(_unit_tests_follow_every_dbt_task, id="unit-tests-read-the-built-staging-relations"),
        pytest.param(_unit_tests_gate_validate_and_publish, id="a-failing-unit-test-publishes-nothing"),
        pytest.param(_cosmos_test_tasks_leave_unit_tests_out, id="unit-tests-run-once-not-again-in-cosmos-tasks"),
    ],
)
def test_ehr_deid_sync_runs_the_dbt_unit_tests(dagbag: Any, check: Callable[[Any], None]) -> None:
    check(dagbag.get_dag("ehr_deid_sync"))


def test_every_dbt_invocation_runs_in_the_dbt_pool(dagbag: Any) -> None:
    dag = dagbag.get_dag("ehr_deid_sync")
    cosmos = {t.task_id for t in _cosmos_tasks(dag)}
    assert all(type(t).__module__.startswith("cosmos.") for t in _cosmos_tasks(dag))
    in_pool = {t.task_id for t in dag.tasks if t.pool == DBT_POOL}
    assert in_pool == cosmos | EVALPKG_DBT_TASKS, sorted(in_pool ^ (cosmos | EVALPKG_DBT_TASKS))


def test_scripts_airflow_creates_every_pool_the_dags_use(dagbag: Any) -> None:
    """A task in a pool that does not exist is never scheduled: the local deployment creates them all."""
    script = (PROJECT_ROOT / "scripts" / "airflow").read_text()
    created = set(re.findall(r'pools set (\w+) "', script))  # the gpu pool's size follows the gpu worker
    used = {t.pool for dag_id in dagbag.dag_ids for t in dagbag.get_dag(dag_id).tasks} - {"default_pool"}
    assert DBT_POOL in used and used <= created, (used, created)
    dbt_slots = re.search(rf'pools set {DBT_POOL} "\$\{{AIRFLOW_DBT_SLOTS:-(\d+)\}}"', script)
    assert dbt_slots and int(dbt_slots.group(1)) > 1  # bounds dbt's parallelism, does not serialize it


def test_evalpkg_dbt_keeps_partial_parsing_under_the_state_dir(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)  # dbt parse reads no database
    before = checkout_files()
    dbt.parse(settings, build=True)
    first = (dbt.log_dir(settings) / "dbt.log").read_text()
    dbt.parse(settings, build=True)
    second = (dbt.log_dir(settings) / "dbt.log").read_text()[len(first) :]
    assert (dbt.target_dir(settings) / "partial_parse.msgpack").is_file()
    assert "Starting full parse" in first
    assert "Starting full parse" not in second and "Partial parsing enabled" in second
    assert checkout_files() == before


pytestmark = pytest.mark.server  # Airflow, dbt or the CLI starting its own services: not in --quick
