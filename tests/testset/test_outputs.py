"""Task outputs and what each question variant asks for (issue 9): validation refuses asks that cannot be
graded, old releases still load, and the templates and the committed release are consistent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from evalpkg.testset import release
from evalpkg.testset.build import load_templates
from evalpkg.testset.gold_checks import output_problems
from evalpkg.testset.models import TASK_FORMAT_VERSION, Complexity, Language, Task

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
GOLD = [["treated", "diabetics", "pct"]]
OUTPUTS = ["treated", "diabetics", "pct"]
NARROW = {"colloquial": ["treated"], "plain": ["treated", "pct"]}  # technical: empty, i.e. every output


def task(
    outputs: list[str] = OUTPUTS,
    asks: dict[str, list[str]] = NARROW,
    gold_sql: int = 1,
    admits: dict[str, list[int]] | None = None,
) -> Task:
    variants = [
        {
            "language": lang,
            "complexity": level,
            "text": f"{lang} {level} question text",
            "asks": asks.get(level, []),
            "admits": (admits or {}).get(level, []),
        }
        for lang in ("zh", "en")
        for level in ("colloquial", "plain", "technical")
    ]
    return Task.model_validate(
        {
            "format_version": 4 if admits else 2,
            "id": "st-sample-001",
            "type": "single_table",
            "difficulty": "easy",
            "variants": variants,
            "turns": [{"user": None, "expected_tool_calls": [{"name": "execute_sql"}]}],
            "gold_sql": [f"select treated, diabetics, pct from coverage_{i}" for i in range(gold_sql)],
            "outputs": [{"name": n, "meaning": {"zh": n, "en": n}, "column": n} for n in outputs],
            "tables": ["t_zy_visit"],
            "provenance": {"source": "template", "template_id": "sample", "generator_version": "t"},
            "review": {"annotators": [{"role": "generator", "id": "t"}], "agreement": 1.0},
        }
    )


@pytest.mark.parametrize(
    ("t", "columns", "expected", "why"),
    [
        (task(), GOLD, [], "every variant asks for outputs the gold returns"),
        (task(), None, [], "without the gold's columns only the names are checked"),
        (task(asks={}), GOLD, [], "variants naming no output ask for all of them"),
        (
            task(),
            [["treated", "diabetics"]],
            [
                "st-sample-001 variant zh/plain: asks for output 'pct' (column 'pct'), which the gold result does not "
                "return"
            ],
            "a variant asks for an output whose column the gold does not return (the technical one, too)",
        ),
        (
            task(asks={**NARROW, "colloquial": ["treated", "rate"]}),
            None,
            ["st-sample-001 variant zh/colloquial: asks for unknown output 'rate'"],
            "a variant names an output the task does not declare",
        ),
        (
            task(asks={"colloquial": ["treated"], "plain": ["treated"], "technical": ["treated", "pct"]}),
            None,
            ["st-sample-001: output 'diabetics' is asked for by no variant"],
            "an output no variant asks for would never be graded",
        ),
        (
            task(outputs=[*OUTPUTS, "pct"]),
            None,
            ["st-sample-001: output 'pct' is declared twice", "st-sample-001: column 'pct' carries two outputs"],
            "output names and columns are unique",
        ),
        (
            task(gold_sql=2),
            [GOLD[0], ["treated", "diabetics"]],
            [],
            "a second gold without pct still answers the variants that do not ask for it",
        ),
        (
            task(asks={}, gold_sql=2),
            [GOLD[0], ["treated", "diabetics"]],
            ["st-sample-001: gold #2 returns the columns of no variant's asks"],
            "a gold that answers no variant is a typo or dead weight",
        ),
        (
            task(gold_sql=2, admits={"technical": [1]}),
            [GOLD[0], ["treated", "diabetics"]],
            [
                "st-sample-001 variant zh/technical: asks for output 'pct' (column 'pct'), which the gold result "
                "does not return"
            ],
            "the technical wording admits only the second gold, which lacks the pct it asks for",
        ),
        (
            task(gold_sql=2, admits={"colloquial": [0], "plain": [0], "technical": [0]}),
            None,
            ["st-sample-001: gold #2 is admitted by no variant"],
            "a gold no wording admits is never graded against",
        ),
        (
            task(asks={}, gold_sql=2, admits={"technical": [0]}),
            [GOLD[0], GOLD[0]],
            [],
            "a gold admitted by some wordings only still answers them",
        ),
        (task(outputs=[], asks={}), GOLD, [], "no outputs declared: every gold column is graded, nothing to check"),
        (
            task(outputs=[], asks={"plain": ["pct"]}),
            None,
            [
                "st-sample-001 variant zh/plain: asks for unknown output 'pct'",
                "st-sample-001 variant en/plain: asks for unknown output 'pct'",
            ],
            "asks without outputs name unknown outputs",
        ),
    ],
)
def test_output_problems(t: Task, columns: list[list[str]] | None, expected: list[str], why: str) -> None:
    problems = output_problems(t, columns)
    assert problems[: len(expected)] == expected, why
    assert bool(problems) == bool(expected), why


def test_the_problem_names_every_variant_that_cannot_be_graded() -> None:
    problems = output_problems(task(), [["treated", "diabetics"]])
    assert [p.split(":")[0] for p in problems] == [
        f"st-sample-001 variant {lang}/{level}" for lang in ("zh", "en") for level in ("plain", "technical")
    ]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"format_version": 1}, "outputs and variant asks need format_version 2"),
        ({"format_version": 5}, "Input should be 1, 2, 3 or 4"),
        ({"outputs": [{"name": "Pct", "meaning": {"zh": "x", "en": "x"}, "column": "pct"}]}, "String should match"),
        ({"outputs": [{"name": "pct", "meaning": {"zh": "x"}}]}, "Field required"),
    ],
)
def test_the_schema_refuses_malformed_outputs(overrides: dict[str, Any], message: str) -> None:
    good = task().model_dump(mode="json")
    with pytest.raises(ValidationError, match=message):
        Task.model_validate({**good, **overrides})


def test_graded_columns_follow_the_variant() -> None:
    t = task()
    assert t.graded_columns(Language.zh, Complexity.colloquial) == ["treated"]
    assert t.graded_columns(Language.en, Complexity.plain) == ["treated", "pct"]
    assert t.graded_columns(Language.zh, Complexity.technical) == OUTPUTS  # asks nothing: every output
    assert task(outputs=[], asks={}).graded_columns(Language.zh, Complexity.colloquial) is None


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_format_1_releases_still_load_and_verify(version: str) -> None:
    rel = release.load(TASKS_DIR, version)  # manifests verified: the files on disk are untouched
    assert rel.tasks and all(t.format_version == 1 and not t.outputs for t in rel.tasks)
    assert all(t.graded_columns(Language.zh, Complexity.colloquial) is None for t in rel.tasks)


def test_the_latest_release_declares_what_every_variant_asks() -> None:
    rel = release.load(TASKS_DIR)
    assert int(rel.version[1:]) >= 3
    assert all(2 <= t.format_version <= TASK_FORMAT_VERSION for t in rel.tasks)  # 3: follow-ups with their gold
    assert all(bool(t.outputs) == t.answerable for t in rel.tasks)
    assert [p for t in rel.tasks for p in output_problems(t)] == []
    narrower = [v for t in rel.tasks for v in t.variants if v.asks and len(v.asks) < len(t.outputs)]
    assert narrower, "some variants ask for less than their gold returns: the point of per-variant grading"


def test_every_template_declares_consistent_outputs() -> None:
    """Each wording's asks are written out (no silent "all"), name declared outputs, and cover every output."""
    for t in load_templates().templates:
        names = [o.name for o in t.outputs]
        assert bool(names) == t.answerable, t.id
        assert len(set(names)) == len(names) == len({o.column for o in t.outputs}), t.id
        for lang in Language:
            for level in Complexity:
                asked = t.asks.get(lang, {}).get(level, [])
                assert bool(asked) == t.answerable and set(asked) <= set(names), f"{t.id} {lang.value}/{level.value}"
        assert {n for levels in t.asks.values() for a in levels.values() for n in a} == set(names), t.id
