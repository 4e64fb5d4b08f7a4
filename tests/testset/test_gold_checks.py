"""One definition of "does this gold hold on this snapshot": a broken gold of each kind is named the same
way by check_golds and by every caller that decides with it (build's parameter choices, validate,
adjudication's arbitrated golds, the refresh's release checks)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalpkg.errors import ConfigError, DataError
from evalpkg.settings import Settings
from evalpkg.sql.gold import GoldRunner, gold_runner
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import adjudicate, build, refresh_checks, release, worlds
from evalpkg.testset.gold_checks import check_golds
from evalpkg.testset.models import Task
from evalpkg.testset.validate import validate
from tests.testset.test_models_and_fingerprints import task_dict

COUNT = {"name": "visits", "meaning": {"zh": "就诊人次", "en": "visits"}, "column": "n"}
# (case, gold SQL, task overrides, the problem code every caller names, why)
BROKEN: list[tuple[str, str, dict[str, Any], str, str]] = [
    ("fails", "select count(no_such_column) as n from emr.t_zy_visit", {}, "fails", "the gold does not run"),
    (
        "empty",
        "select ksdm as n from emr.t_zy_visit where false",
        {"answer_points": []},
        "empty",
        "no rows, and neither result.empty_expected nor notes saying fewer rows are expected",
    ),
    (
        "null",
        "select max(zyts) as n from emr.t_zy_visit where false",
        {"answer_points": []},
        "only_null",
        "one row of NULL: no number to check",
    ),
    (
        "ties",
        "select ksdm as n from emr.t_zy_visit order by visit_type limit 1",
        {"answer_points": [], "result": {"order_matters": True}},
        "nondeterministic",
        "its LIMIT cuts through rows tied on the ORDER BY key: the key decides which row",
    ),
    (
        "outputs",
        "select count(*) as total from emr.t_zy_visit",
        {"outputs": [COUNT], "format_version": 2},
        "outputs",
        "the variants ask for n, which the gold does not return",
    ),
]
IDS = [case for case, *_ in BROKEN]


def broken(case: str, sql: str, overrides: dict[str, Any]) -> Task:
    return Task.model_validate(task_dict(id=f"st-{case}-001", gold_sql=[sql], **overrides))


@pytest.fixture(scope="module")
def golds(synced: SyncReport, generated: Settings) -> Iterator[GoldRunner]:
    with gold_runner(generated) as runner:
        yield runner


@pytest.mark.parametrize(("case", "sql", "overrides", "code", "why"), BROKEN, ids=IDS)
def test_every_caller_names_the_same_problem(
    golds: GoldRunner,
    generated: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    sql: str,
    overrides: dict[str, Any],
    code: str,
    why: str,
) -> None:
    task = broken(case, sql, overrides)
    found = check_golds(task, golds)
    assert [p.code for p in found][:1] == [code], (why, [str(p) for p in found])
    first = found[0]

    # build: a choice with a broken gold is skipped with that reason (a template's wrong outputs: an error)
    if code == "outputs":
        with pytest.raises(ConfigError, match=_escaped(str(first))):
            build.check_gold(golds, task, set(), {})
    else:
        assert build.check_gold(golds, task, set(), {}) == str(first)

    # adjudication: an arbitrated gold with the problem cannot be used
    before = task.model_copy(update={"gold_sql": ["select count(*) as n from emr.t_zy_visit"]})
    with pytest.raises(DataError, match=f"cannot be used: {_escaped(first.message)}"):
        adjudicate._check_new_golds(generated, [task], {task.id: before})

    # the refresh's release checks, with this snapshot standing for a reference world
    world = worlds.WORLDS[0]
    monkeypatch.setattr(worlds, "each", lambda settings, reference, progress: iter([(world, generated)]))
    problems = refresh_checks._problems(generated, [task], (world,), lambda _: None)[task.id]
    assert f"{first.message} in the reference world {world.label()}" in problems

    # validate: the release holding the task fails on it in a reference world; on any other snapshot it
    # fails only on what the task decides, and reports what the data decides (another key may thin a year)
    ts = generated.model_copy(update={"tasks_dir": tmp_path})
    release.write(tmp_path, "v4", [task], "snap", release.ChangeSet(added={task.id: "test"}))
    held = validate(ts, "v4", min_tasks=1, hold_findings=True)
    assert any(p.endswith(str(first)) for p in held.problems), (first, held.problems)
    anywhere = validate(ts, "v4", min_tasks=1)
    reported = [p for p in anywhere.problems + anywhere.findings() if p.endswith(str(first))]
    failed = [p for p in anywhere.problems if p.endswith(str(first))]
    assert reported and bool(failed) == (code in ("fails", "outputs")), (first, anywhere.problems)


def _escaped(text: str) -> str:
    return re.escape(text)
