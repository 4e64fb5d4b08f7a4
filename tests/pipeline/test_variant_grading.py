"""Per-variant grading (issue 9): an instance is graded on the outputs its question variant asks for.
Every case names its reason; the results come from a stand-in executor, so no database is needed."""

from __future__ import annotations

from typing import Any, cast

import pytest

from evalpkg.agent.trajectory import Step, ToolCallRecord, Trajectory
from evalpkg.grading.execution import GoldCache, execution_match
from evalpkg.pipeline import semantic
from evalpkg.pipeline.score import InstanceScore, score_instance
from evalpkg.settings import Settings
from evalpkg.sql.executor import QueryFailed, QueryResult, ReadOnlyExecutor
from evalpkg.sql.gold import GoldRunner, gold_runner
from evalpkg.sync.runner import SyncReport
from evalpkg.testset.models import Task

GOLD = "select diabetics, treated, pct from coverage"
COLUMNS = ["diabetics", "treated", "pct"]
ROW = [40, 30, 75.0]
ASKS = {"colloquial": ["treated"], "plain": ["treated", "pct"], "technical": COLUMNS}
Result = tuple[list[str], list[list[Any]]]


class Results:
    """The stand-in executor: SQL text -> (columns, rows); any other SQL fails like a bad query."""

    row_cap = 1000

    def __init__(self, results: dict[str, Result]) -> None:
        self.results = results

    def run(self, sql: str) -> QueryResult:
        if sql not in self.results:
            raise QueryFailed("relation does not exist")
        columns, rows = self.results[sql]
        return QueryResult(columns=columns, rows=rows, total_rows=len(rows), capped=False, elapsed_ms=1.0)


def make_task(
    outputs: list[str] | None = COLUMNS,
    asks: dict[str, list[str]] = ASKS,
    gold: list[str] | None = None,
    *,
    order_matters: bool = False,
    points: int = 3,
) -> Task:
    """A task whose variants ask as `asks` says per complexity (outputs None: a format 1 task)."""
    variants = [
        {"language": lang, "complexity": level, "text": f"{lang} {level} question", "asks": asks.get(level, [])}
        for lang in ("zh", "en")
        for level in ("colloquial", "plain", "technical")
    ]
    if outputs is None:
        variants = [{k: v for k, v in variant.items() if k != "asks"} for variant in variants]
    return Task.model_validate(
        {
            "format_version": 1 if outputs is None else 2,
            "id": "ja-coverage-001",
            "type": "join_aggregate",
            "difficulty": "hard",
            "variants": variants,
            "turns": [{"user": None, "expected_tool_calls": [{"name": "execute_sql"}]}],
            "gold_sql": gold or [GOLD],
            "outputs": [{"name": n, "meaning": {"zh": n, "en": n}, "column": n} for n in outputs or []],
            "result": {"order_matters": order_matters, "numeric_tolerance": 0.01},
            "answer_points": [{"kind": "number", "row": 0, "col": c, "tolerance": 0.0} for c in range(points)],
            "tables": ["t_zy_visit"],
            "provenance": {"source": "template", "template_id": "coverage", "generator_version": "t"},
            "review": {"annotators": [{"role": "generator", "id": "t"}], "agreement": 1.0},
        }
    )


def score(
    task: Task, level: str, pred: Result | None, answer: str, golds: dict[str, Result] | None = None
) -> InstanceScore:
    results = {sql: (golds or {}).get(sql, (COLUMNS, [ROW])) for sql in task.gold_sql}
    if pred is not None:
        results["agent sql"] = pred
    executor = cast(ReadOnlyExecutor, Results(results))
    traj = trajectory(task, level, answer, "agent sql" if pred is not None else None)
    return score_instance(task, traj, 0, GoldCache(GoldRunner(executor)))


def trajectory(
    task: Task, level: str, answer: str, final_sql: str | None, steps: list[Step] | None = None
) -> Trajectory:
    """An instance of the task's zh wording at `level` that ended with this answer and SQL."""
    return Trajectory(
        instance_id=f"{task.id}:zh:{level}:0",
        task_id=task.id,
        agent="test",
        language="zh",
        complexity=level,
        question=f"zh {level} question",
        steps=steps or [],
        final_answer=answer,
        final_sql=final_sql,
    )


@pytest.mark.parametrize(
    ("level", "pred", "answer", "match", "coverage", "why"),
    [
        (
            "colloquial",
            (["treated"], [[30]]),
            "30 位患者在用降糖药",
            True,
            1.0,
            "asks only the count: the count alone matches, the denominator and percentage points are not graded",
        ),
        ("colloquial", (["n"], [[30]]), "30", True, 1.0, "the asked column may carry any name"),
        ("colloquial", (COLUMNS, [ROW]), "30 of 40, 75%", True, 1.0, "the full gold result is still accepted"),
        ("colloquial", (["treated"], [[31]]), "31", False, 0.0, "a wrong count is still wrong"),
        (
            "colloquial",
            (["treated", "pct"], [[30, 12.0]]),
            "30",
            True,
            1.0,
            "a wrong value in a column the variant does not ask for is not graded",
        ),
        (
            "colloquial",
            (["diabetics"], [[30]]),
            "30",
            False,
            1.0,
            "a column named like another output claims that meaning: it cannot stand for the asked count",
        ),
        ("plain", (["treated", "pct"], [[30, 75.0]]), "30, 75%", True, 1.0, "asks count and percentage: both given"),
        ("plain", (["treated"], [[30]]), "30", False, 0.5, "asks the percentage too: the count alone fails"),
        (
            "technical",
            (["diabetics", "treated"], [[40, 30]]),
            "30 of 40",
            False,
            2 / 3,
            "asks all three: a missing percentage fails the match and its answer point",
        ),
        ("technical", (COLUMNS, [ROW]), "40, 30, 75%", True, 1.0, "asks all three: all three given"),
        ("technical", None, "30", False, 1 / 3, "no SQL at all fails whatever was asked"),
    ],
)
def test_a_variant_is_graded_on_what_it_asks(
    level: str, pred: Result | None, answer: str, match: bool, coverage: float, why: str
) -> None:
    s = score(make_task(), level, pred, answer)
    assert (s.exec_match, s.correct) == (match, match), why
    assert s.answer_coverage == pytest.approx(coverage), why


@pytest.mark.parametrize(
    ("level", "pred", "match", "why"),
    [
        ("colloquial", (["treated"], [[30]]), False, "no outputs declared: every gold column is graded, as before"),
        ("technical", (COLUMNS, [ROW]), True, "no outputs declared: the whole gold result matches"),
        ("colloquial", (["x", *COLUMNS], [[1, *ROW]]), True, "no outputs declared: extra columns are still accepted"),
    ],
)
def test_tasks_without_outputs_are_graded_as_before(level: str, pred: Result, match: bool, why: str) -> None:
    s = score(make_task(outputs=None), level, pred, "40 30 75%")
    assert s.exec_match is match, why
    assert s.answer_coverage == 1.0, why  # every number point is graded: the answer states all three


RANKED = "select name, code, visits from ranked order by visits desc, code"
RANKED_RESULT = (["name", "code", "visits"], [["flu", "J11", 9], ["cold", "J00", 5], ["cough", "R05", 5]])


@pytest.mark.parametrize(
    ("pred", "match", "why"),
    [
        ([["flu"], ["cold"], ["cough"]], True, "the gold's ORDER BY keys are not asked: its row order still counts"),
        ([["flu"], ["cough"], ["cold"]], True, "the tie on visits is broken by code only: tied rows in any order"),
        ([["cold"], ["flu"], ["cough"]], False, "another order of the asked column"),
        ([["flu"], ["cold"]], False, "a missing row"),
    ],
)
def test_order_survives_when_its_keys_are_not_asked(pred: list[list[Any]], match: bool, why: str) -> None:
    task = make_task(["name", "code", "visits"], {"colloquial": ["name"]}, [RANKED], order_matters=True, points=0)
    assert score(task, "colloquial", (["name"], pred), "", {RANKED: RANKED_RESULT}).exec_match is match, why


WIDE = "select diabetics, treated from coverage_wide"
GOLDS = {GOLD: (COLUMNS, [ROW]), WIDE: (["diabetics", "treated"], [[41, 31]])}


@pytest.mark.parametrize(
    ("level", "pred", "match", "why"),
    [
        ("colloquial", (["treated"], [[30]]), True, "the first gold answers the count"),
        ("colloquial", (["treated"], [[31]]), True, "so does the second: it returns every column the variant asks"),
        ("technical", (COLUMNS, [ROW]), True, "the first gold returns all three"),
        (
            "technical",
            (["diabetics", "treated"], [[41, 31]]),
            False,
            "the second lacks pct: it answers no such variant",
        ),
    ],
)
def test_a_gold_answers_only_the_variants_whose_columns_it_returns(
    level: str, pred: Result, match: bool, why: str
) -> None:
    assert score(make_task(gold=[GOLD, WIDE]), level, pred, "", GOLDS).exec_match is match, why


class Counting(Results):
    """The stand-in executor, counting the queries it ran."""

    def __init__(self, results: dict[str, Result]) -> None:
        super().__init__(results)
        self.ran: list[str] = []

    def run(self, sql: str) -> QueryResult:
        self.ran.append(sql)
        return super().run(sql)


@pytest.mark.parametrize(
    ("sql", "runs", "status", "why"),
    [
        (GOLD, [GOLD], "success", "the gold's own text: its result is the gold's, the query runs once"),
        ("agent sql", [GOLD, "agent sql"], "success", "another text runs on its own"),
        ("no such table", [GOLD, "no such table"], "failure", "a failing query is still a failure"),
        (None, [GOLD], "failure", "no SQL runs nothing"),
    ],
)
def test_a_prediction_is_run_once_and_a_gold_text_not_again(
    sql: str | None, runs: list[str], status: str, why: str
) -> None:
    executor = Counting({GOLD: (COLUMNS, [ROW]), "agent sql": (COLUMNS, [ROW])})
    gold = GoldCache(GoldRunner(cast(ReadOnlyExecutor, executor)))
    task = make_task()
    for _ in range(3):  # repeats send the same query
        result = execution_match(task, sql, gold)
    assert executor.ran == runs, why
    assert result[:2] == (status, status == "success"), why


def test_a_prediction_that_is_another_golds_text_keeps_the_decimals_its_query_wrote(
    synced: SyncReport, generated: Settings
) -> None:
    """A stale follow-up sends the turn before's gold (5.80, written to two decimals). Read from the gold cache,
    it is graded as when it runs afresh: its query wrote two decimals, so it is no coarser 5.8 standing for
    this turn's 5.81 (the cache holds JSON rows, where 5.80 is the float 5.8)."""
    before, this = "select round(5.8, 2) as m", "select round(5.812, 2) as m"
    task = make_task(["m"], {level: ["m"] for level in ASKS}, gold=[this], points=1)
    task = task.model_copy(update={"result": task.result.model_copy(update={"numeric_tolerance": 0.001})})
    with gold_runner(generated) as fresh_runner, gold_runner(generated) as before_runner:
        fresh, graded_before = GoldCache(fresh_runner), GoldCache(before_runner)
        graded_before.get(before)  # the turn before was graded on this cache
        for gold in (fresh, graded_before):
            assert execution_match(task, before, gold, ["m"])[:2] == ("success", False)
        assert execution_match(task, "select 5.8 as m", fresh, ["m"])[1]  # one decimal: read at one


# Two readings of "patients on a drug in 2023": gold #0 counts orders started in the year, gold #1 orders active
# during it. The technical wordings say "started (kssj) in 2023" and admit gold #0 only.
STARTED = "select count(distinct patient_id) as patients from orders where kssj >= '2023-01-01'"
ACTIVE = "select count(distinct patient_id) as patients from orders where coalesce(jssj, now()) >= '2023-01-01'"
READINGS = {STARTED: (["patients"], [[30]]), ACTIVE: (["patients"], [[42]])}


def reading_task() -> Task:
    """A time-series task (so the first query is graded too) with both readings, the technical wordings
    admitting the first only."""
    task = make_task(["patients"], {}, gold=[STARTED, ACTIVE], points=1)
    variants = [v.model_copy(update={"admits": [0] if v.complexity == "technical" else []}) for v in task.variants]
    data = task.model_dump() | {"format_version": 4, "type": "time_series", "variants": variants}
    return Task.model_validate(data)


def score_reading(task: Task, level: str, patients: int) -> InstanceScore:
    """An instance of the zh wording at `level` whose first query and final query (two texts) count `patients`."""
    results = {**READINGS, "first sql": (["patients"], [[patients]]), "agent sql": (["patients"], [[patients]])}
    first = ToolCallRecord(
        call_id="c1",
        name="execute_sql",
        arguments={"sql": "first sql"},
        ok=True,
        result="{}",
        result_sha256="",
        started_at="t",
        elapsed_ms=0,
    )
    steps = [Step(index=0, started_at="t", ended_at="t", tool_calls=[first])]
    traj = trajectory(task, level, f"{patients} patients", "agent sql", steps)
    return score_instance(task, traj, 0, GoldCache(GoldRunner(cast(ReadOnlyExecutor, Results(results)))))


@pytest.mark.parametrize(
    ("level", "patients", "correct", "why"),
    [
        ("plain", 30, True, "the plain wording admits every gold: the started-in reading is right"),
        ("plain", 42, True, "the plain wording admits every gold: the active-during reading is right too"),
        ("technical", 30, True, "the technical wording names the started-in reading: its gold #0 is right"),
        ("technical", 42, False, "the technical wording says 'started (kssj)': the active-during gold is not its"),
        ("colloquial", 42, True, "a wording without admits is graded as before, against each gold"),
        ("technical", 31, False, "a number no reading gives is wrong whatever the wording admits"),
    ],
)
def test_a_wording_is_graded_against_the_golds_it_admits(level: str, patients: int, correct: bool, why: str) -> None:
    task = reading_task()
    s = score_reading(task, level, patients)
    assert (s.exec_match, s.correct) == (correct, correct), why
    assert s.first_attempt_correct is correct, f"{why} (the first query, graded apart)"
    assert s.answer_coverage == float(correct), f"{why} (the answer's number read against an admitted gold)"
    # the reference worlds grade the same instance alike (semantic accuracy)
    gold = GoldCache(
        GoldRunner(cast(ReadOnlyExecutor, Results({**READINGS, "agent sql": (["patients"], [[patients]])})))
    )
    assert semantic._matches(task, s, "agent sql", gold) is correct, f"{why} (in a reference world)"


@pytest.mark.parametrize(
    ("level", "golds", "why"),
    [
        ("technical", [STARTED], "the technical wording admits gold #0 only"),
        ("plain", [STARTED, ACTIVE], "a wording that admits every gold: the task itself"),
        ("unknown", [STARTED, ACTIVE], "a wording the task does not have: the task itself"),
    ],
)
def test_graded_for_keeps_the_admitted_golds(level: str, golds: list[str], why: str) -> None:
    task = reading_task()
    graded = task.graded_for("zh", level)
    assert graded.gold_sql == golds, why
    assert (graded is task) == (golds == task.gold_sql), why
    assert graded.graded_for("zh", level).gold_sql == golds, "grading the copy again changes nothing"
