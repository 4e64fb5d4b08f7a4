"""Task schema round-trips and rejects inconsistent tasks; SQL fingerprints behave."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from evalpkg.settings import PROJECT_ROOT
from evalpkg.sql import fingerprint
from evalpkg.testset import release
from evalpkg.testset.models import Task


def task_dict(**overrides: Any) -> dict[str, Any]:
    variants = [
        {"language": lang, "complexity": level, "text": f"{lang} {level} question text"}
        for lang in ("zh", "en")
        for level in ("colloquial", "plain", "technical")
    ]
    base: dict[str, Any] = {
        "id": "st-sample-001",
        "type": "single_table",
        "difficulty": "easy",
        "variants": variants,
        "turns": [
            {
                "user": None,
                "expected_tool_calls": [{"name": "execute_sql", "args": {"sql": {"contains_all": ["t_zy_visit"]}}}],
            }
        ],
        "gold_sql": ["select count(*) from emr.t_zy_visit"],
        "tables": ["t_zy_visit"],
        "answer_points": [{"kind": "number", "row": 0, "col": 0}],
        "provenance": {"source": "template", "template_id": "sample", "generator_version": "t"},
        "review": {
            "annotators": [{"role": "clinician", "id": "c1"}, {"role": "dba", "id": "d1"}],
            "agreement": 0.92,
            "arbitration": "clinician and DBA agreed on the discharge column",
        },
    }
    base.update(overrides)
    return base


def test_round_trip_is_lossless() -> None:
    task = Task.model_validate(task_dict())
    again = Task.model_validate_json(task.model_dump_json())
    assert again == task
    assert json.loads(again.model_dump_json())["format_version"] == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"variants": task_dict()["variants"][:3]}, "both zh and en"),
        ({"variants": task_dict()["variants"][:2] + task_dict()["variants"][3:]}, "all three complexities"),
        ({"answerable": False}, "gold_sql must be empty exactly when"),
        ({"type": "clarification"}, "hidden_slots are required"),
        ({"answer_points": [{"kind": "number"}]}, "needs row and col"),
        ({"id": "Bad Id"}, "String should match pattern"),
        ({"tags": ["made_up"]}, "Input should be"),
        ({"extra_field": 1}, "Extra inputs are not permitted"),
        (  # format-2 readers do not know the field: a file that carries it says it is format 3
            {"format_version": 2, "premise": {"kind": "change", "measure": "visits", "min_relative": 0.25}},
            "a stated premise needs format_version 3",
        ),
        (
            {
                "format_version": 2,
                "turns": [
                    *task_dict()["turns"],
                    {"user": {"zh": "再按科室", "en": "by dept"}, "expected_tool_calls": [], "gold_sql": ["select 1"]},
                ],
            },
            "carries its own gold: that needs format_version 3",
        ),
    ],
)
def test_inconsistent_tasks_are_rejected(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Task.model_validate(task_dict(**overrides))


TWO_GOLDS = ["select count(*) from emr.t_zy_visit", "select count(distinct patient_id) from emr.t_zy_visit"]


def admitting(admits: list[int], **overrides: Any) -> dict[str, Any]:
    """A format 4 task with two golds whose zh/technical wording admits `admits`."""
    variants = [
        v | {"admits": admits} if v["complexity"] == "technical" and v["language"] == "zh" else v
        for v in task_dict()["variants"]
    ]
    return task_dict(format_version=4, gold_sql=TWO_GOLDS, variants=variants) | overrides


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (admitting([2]), "variant zh/technical admits gold 2, but its golds are numbered 0 to 1"),
        (admitting([-1]), "variant zh/technical admits gold -1, but its golds are numbered 0 to 1"),
        (admitting([1, 1]), "variant zh/technical admits gold 1 twice"),
        (
            admitting([0], answerable=False, gold_sql=[], answer_points=[]),
            "variant zh/technical admits golds, but the task is unanswerable",
        ),
        (  # format-3 readers would grade the wording against every gold: the file says it is format 4
            admitting([0], format_version=3),
            "variant zh/technical names the golds it admits: that needs format_version 4",
        ),
    ],
    ids=["an index past the golds", "a negative index", "a gold named twice", "no golds to admit", "format 3"],
)
def test_a_wording_admits_distinct_golds_of_its_task(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Task.model_validate(data)


def test_admitted_golds_name_turn_0_only() -> None:
    """A follow-up turn is graded against all its golds whatever turn 0's wording admits."""
    followup = {"user": {"zh": "再按科室", "en": "by dept"}, "expected_tool_calls": [], "gold_sql": TWO_GOLDS}
    task = Task.model_validate(admitting([1], turns=[*task_dict()["turns"], followup]))
    assert task.graded_for("zh", "technical").gold_sql == TWO_GOLDS[1:]
    assert task.graded_for("en", "technical") is task  # the en wording admits every gold
    assert task.turn_task(1).graded_for("zh", "technical").gold_sql == TWO_GOLDS


ADMITS_RELEASE = 12  # the first release whose wordings name the golds they admit


@pytest.mark.parametrize("version", release.versions(PROJECT_ROOT / "tasks"))
def test_releases_load_grade_and_re_write_as_cut(version: str) -> None:
    """Before v12 no released wording admits a subset: each is graded against every gold; from v12 on, only
    technical wordings do. A task re-written is the same bytes (an unused admits is left out of the file, as
    format 3's fields are; format 1 files, which predate asks too, are never re-written)."""
    rel = release.load(PROJECT_ROOT / "tasks", version)
    narrowed = {
        v.complexity.value for t in rel.tasks for v in t.variants if t.graded_for(v.language, v.complexity) is not t
    }
    assert narrowed == (set() if int(version[1:]) < ADMITS_RELEASE else {"technical"})
    folder = PROJECT_ROOT / "tasks" / version / "tasks"
    rewritten = [t for t in rel.tasks if t.format_version > 1]
    assert all(release.task_json(t) == (folder / f"{t.id}.json").read_text(encoding="utf-8") for t in rewritten)


def test_fingerprints_ignore_formatting_and_schema_but_not_literals() -> None:
    a = "select count(*) from emr.t_zy_visit where ksdm = '0101'"
    assert fingerprint.exact(a) == fingerprint.exact("SELECT COUNT(*)\n  FROM t_zy_visit WHERE ksdm='0101'")
    other = "select count(*) from t_zy_visit where ksdm = '0102'"
    assert fingerprint.exact(a) != fingerprint.exact(other)
    assert fingerprint.pattern(a) == fingerprint.pattern(other)


@pytest.mark.parametrize(
    "sql",
    [
        "delete from emr.t_lab_result",
        "select 1; select 2",
        "with d as (delete from t returning *) select * from d",
        "create table x as select 1",
        "not sql at all (",
    ],
)
def test_only_single_read_queries_count_as_gold(sql: str) -> None:
    assert not fingerprint.is_single_select(sql)


def test_tables_skip_cte_names() -> None:
    sql = "with x as (select * from emr.t_lab_result) select * from x join emr.t_zy_visit v using (visit_id)"
    assert fingerprint.tables(sql) == ["t_lab_result", "t_zy_visit"]


def test_the_published_task_schema_is_the_models() -> None:
    """tasks/schema/task.schema.json is what other tools validate task files against: it must not lag the
    model (regenerate with build.export_schema)."""
    published = json.loads((PROJECT_ROOT / "tasks" / "schema" / "task.schema.json").read_text(encoding="utf-8"))
    assert published == Task.model_json_schema()
