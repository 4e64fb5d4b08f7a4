"""Double annotation: agreement is computed by running the second annotator's SQL next to the gold on
the snapshot, per non-technical variant, with the scorer's comparator; arbitration is recorded only for
tasks the annotators disagreed on, with who decided and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalpkg.errors import DataError, UsageError
from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sql.gold import agent_connection, gold_runner
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import annotate, release
from evalpkg.testset.annotate import Annotation, Written
from evalpkg.testset.build import fill, load_templates
from evalpkg.testset.models import Annotator, Task
from evalpkg.testset.params import domains

DISCHARGES = "select count(*) as discharges from emr.t_zy_visit where visit_type = 'ZY' and cyrq >= '{quarter.start}' and cyrq < '{quarter.end}'"
ANNOTATOR = Annotator(role="analyst", id="analyst-2")
FOLLOWUP_FILE = "templates/v7_followups.json"

# outpatient visits where the gold counts stays; both agree the BMI question is unanswerable
WRONG = Annotation(
    annotator=ANNOTATOR,
    templates={
        "discharges_quarter": Written(sql=DISCHARGES.replace("'ZY'", "'MZ'")),
        "unanswerable_bmi": Written(sql=None),
    },
)

# (template, what the annotator wrote, expected agreement, why)
CASES = [
    ("discharges_quarter", DISCHARGES, 1.0, "the same query: they agree"),
    (
        "discharges_quarter",
        "select n as total_discharged from (select count(*) as n from emr.t_zy_visit where cyrq >= '{quarter.start}' and cyrq < '{quarter.end}' and visit_type = 'ZY') x",
        1.0,
        "written another way, same answer: the comparator's equality, not the text",
    ),
    ("discharges_quarter", DISCHARGES.replace("'ZY'", "'MZ'"), 0.0, "outpatient visits, not stays: a different answer"),
    ("discharges_quarter", None, 0.0, "the annotator found an answerable question unanswerable"),
    ("unanswerable_bmi", None, 1.0, "both find the question unanswerable"),
    ("unanswerable_bmi", "select 1 as bmi", 0.0, "the annotator answered an unanswerable question"),
]


def cases_release(root: Path) -> list[Task]:
    """The committed v4's tasks of the two templates, written as release v1 under root."""
    templates = {c[0] for c in CASES}
    tasks = [t for t in release.load(PROJECT_ROOT / "tasks", "v4").tasks if t.provenance.template_id in templates]
    release.write(root, "v1", tasks, "snap", release.ChangeSet(added={t.id: "test" for t in tasks}))
    return tasks


@pytest.fixture(scope="module")
def v4_tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("annotate")
    cases_release(root)
    return root


@pytest.mark.parametrize(("template", "sql", "expected", "why"), CASES, ids=[c[3] for c in CASES])
def test_agreement_is_measured_on_the_snapshot(
    synced: SyncReport, generated: Settings, v4_tasks: Path, template: str, sql: str | None, expected: float, why: str
) -> None:
    local = generated.model_copy(update={"tasks_dir": v4_tasks})
    measured = annotate.measure(local, Annotation(annotator=ANNOTATOR, templates={template: Written(sql=sql)}))
    mine = [t for t in measured.tasks if t.detail != "not annotated"]
    assert mine and all(t.agreement == expected for t in mine), (why, mine[:2])
    others = [t for t in measured.tasks if t.detail == "not annotated"]
    assert all(t.agreement == 0.0 for t in others) and len(mine) + len(others) == len(measured.tasks)


def test_a_placeholder_that_is_no_parameter_field_is_named(
    synced: SyncReport, generated: Settings, v4_tasks: Path
) -> None:
    bad = Annotation(annotator=ANNOTATOR, templates={"discharges_quarter": Written(sql="select '{quarter.first_day}'")})
    with pytest.raises(DataError, match=r"template discharges_quarter: placeholder .*first_day"):
        annotate.measure(generated.model_copy(update={"tasks_dir": v4_tasks}), bad)


def test_arbitration_is_for_disagreements_only_and_says_why(
    synced: SyncReport, generated: Settings, v4_tasks: Path
) -> None:
    local = generated.model_copy(update={"tasks_dir": v4_tasks})
    measured = annotate.measure(local, WRONG)
    annotate.save(v4_tasks, WRONG, measured)
    disagreeing = measured.disagreements()[0].task_id
    agreeing = next(t.task_id for t in measured.tasks if t.agreement == 1.0)
    with pytest.raises(UsageError, match="not a task the annotators disagreed on"):
        annotate.arbitrate(v4_tasks, agreeing, "gold_upheld", "clinician-1", "both right")
    with pytest.raises(UsageError, match="say why"):
        annotate.arbitrate(v4_tasks, disagreeing, "gold_upheld", "clinician-1", " ")
    annotate.arbitrate(v4_tasks, disagreeing, "gold_upheld", "clinician-1", "the question asks for discharges")
    [(task_id, decision)] = annotate.decisions(v4_tasks).items()
    assert task_id == disagreeing and decision.outcome == "gold_upheld" and decision.by == "clinician-1"
    stored = annotate.AgreementFile.model_validate_json(
        (v4_tasks / "annotations" / "analyst-2.agreement.json").read_text()
    )
    assert stored.tasks == measured.tasks and stored.snapshot_version == measured.snapshot_version


def test_adjudication_records_both_annotators_and_applies_the_outcomes(
    synced: SyncReport, generated: Settings, tmp_path: Path
) -> None:
    from evalpkg.testset.adjudicate import adjudicate
    from evalpkg.testset.worlds import World

    tasks = cases_release(tmp_path)
    local = generated.model_copy(update={"tasks_dir": tmp_path})
    measured = annotate.measure(local, WRONG)
    annotate.save(tmp_path, WRONG, measured)
    with pytest.raises(DataError, match=r"disagreement.* without an arbitration"):
        adjudicate(local, "v1", reference=())
    upheld, dropped, widened, *rest = [t.task_id for t in measured.disagreements()]
    by_id = {t.id: t for t in tasks}
    same = f"select discharges from ({by_id[widened].gold_sql[0]}) g"
    annotate.arbitrate(tmp_path, upheld, "gold_upheld", "clinician-1", "discharges, not outpatient visits")
    annotate.arbitrate(tmp_path, dropped, "dropped", "clinician-1", "too thin a quarter")
    annotate.arbitrate(tmp_path, widened, "alternative_added", "clinician-1", "both readings", sql=same)
    for task_id in rest:
        annotate.arbitrate(tmp_path, task_id, "gold_upheld", "clinician-1", "discharges, not outpatient visits")

    rel, plan = adjudicate(local, "v1", reference=(World(2000, 7, 0),))
    out = rel.by_id()
    assert dropped not in out and "too thin a quarter" in plan.changes.removed[dropped]
    assert out[widened].gold_sql == [*by_id[widened].gold_sql, same]
    agreement = {t.task_id: t.agreement for t in measured.tasks}
    for task in out.values():
        assert [a.id for a in task.review.annotators] == ["templates-v1", "analyst-2"], task.id
        assert task.review.agreement == agreement[task.id] and task.review.status == "approved"
        assert (task.review.arbitration is not None) == (agreement[task.id] < 1.0), task.id
    assert out[upheld].review.arbitration == "gold_upheld by clinician-1: discharges, not outpatient visits"
    assert "before arbitration" in (tmp_path / release.CHANGELOG).read_text(encoding="utf-8")


FOLLOWUP_TEMPLATE = "fu_admissions_year"


@pytest.fixture(scope="module")
def followup_tasks(synced: SyncReport, generated: Settings) -> list[Task]:
    """The tasks of one three-turn follow-up template, filled on the test snapshot as build fills them."""
    with agent_connection(generated) as conn, conn.transaction():
        domain = domains(conn)
    [template] = [t for t in load_templates(FOLLOWUP_FILE).templates if t.id == FOLLOWUP_TEMPLATE]
    with gold_runner(generated) as golds:
        made, _ = fill(golds, template, domain, seed=1, seen=set())
    assert made and all(t.graded_turns() == [0, 1, 2] for t in made)
    return made


def _template_sql() -> tuple[str, list[str]]:
    [t] = [t for t in load_templates(FOLLOWUP_FILE).templates if t.id == FOLLOWUP_TEMPLATE]
    return t.gold_sql[0], [turn["gold_sql"][0] for turn in t.turns[1:]]


# (what the annotator wrote per follow-up turn, expected agreement, the turn named as differing, why)
FOLLOWUP_CASES: list[tuple[str, float, str, str]] = [
    ("gold", 1.0, "", "every turn as the gold: the dialogue agrees"),
    # women left out (not read as men: under some keys a year's men and women admissions are as many)
    ("second_turn_everyone", 2 / 3, "turn 2", "the narrower population left out: only that turn differs"),
    ("first_turn_missing", 1 / 3, "turn 1: not annotated", "follow-ups not written: each counts as a disagreement"),
    ("none", 0.0, "not annotated", "nothing written for the task: not annotated, as a one-turn task"),
]


@pytest.mark.parametrize(("case", "expected", "named", "why"), FOLLOWUP_CASES, ids=[c[3] for c in FOLLOWUP_CASES])
def test_follow_up_turns_are_measured_each_on_their_own_gold(
    generated: Settings, followup_tasks: list[Task], case: str, expected: float, named: str, why: str
) -> None:
    first, later = _template_sql()
    followups = {
        "gold": [Written(sql=s) for s in later],
        "second_turn_everyone": [Written(sql=later[0]), Written(sql=later[1].replace("p.xb = 2 and ", ""))],
        "first_turn_missing": [],
        "none": [],
    }[case]
    assert case != "second_turn_everyone" or "p.xb = 2 and " in later[1], (
        "the template's turn 2 no longer filters women"
    )
    annotation = Annotation(
        annotator=ANNOTATOR,
        templates={FOLLOWUP_TEMPLATE: Written(sql=first)} if case != "none" else {},
        followups={FOLLOWUP_TEMPLATE: followups},
    )
    measured = annotate.measure_tasks(generated, annotation, followup_tasks, "followups")
    assert [t.task_id for t in measured.tasks] == [t.id for t in followup_tasks]
    for got in measured.tasks:
        assert got.agreement == pytest.approx(expected), (why, got)
        assert (named in got.detail) if named else got.detail == "match", (why, got.detail)
        assert case != "none" or got.detail == "not annotated", (why, got.detail)


def test_agreement_counts_only_the_tasks_the_annotator_wrote_for() -> None:
    """An annotation may cover some templates only (analyst-3 wrote for v7's new ones): the others are
    neither agreements nor disagreements to arbitrate."""
    measured = annotate.AgreementFile(
        annotator=ANNOTATOR,
        version="v7",
        snapshot_version="snap",
        measured_at="now",
        tasks=[
            annotate.TaskAgreement(task_id="a", agreement=1.0, detail="match"),
            annotate.TaskAgreement(task_id="b", agreement=0.5, detail="differs for zh/plain (success)"),
            annotate.TaskAgreement(task_id="c", agreement=0.0, detail=annotate.NOT_ANNOTATED),
        ],
    )
    assert [t.task_id for t in measured.annotated()] == ["a", "b"]
    assert [t.task_id for t in measured.disagreements()] == ["b"] and measured.overall() == 0.5
