"""Trap mutations: each trap tag's trap-blind rewrite does what it says (pure sqlglot, every case names its
reason); on the test world a real trap bites and a broken one does not; old releases report, v4 fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest

from evalpkg.agent.policies import perturbation_policy
from evalpkg.settings import Settings
from evalpkg.sql import fingerprint
from evalpkg.sql.gold import gold_runner
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release, traps
from evalpkg.testset.models import Tag, Task
from evalpkg.testset.traps import TRAP_TAGS, mutate, perturb_sql
from evalpkg.testset.validate import validate
from tests.testset.test_models_and_fingerprints import task_dict

V, L, M = "emr.t_zy_visit", "emr.t_lab_result", "emr.t_med_order"
TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
Q1 = "cyrq >= '2024-01-01' and cyrq < '2024-04-01'"


@pytest.mark.parametrize(
    ("tag", "gold", "expected", "why"),
    [
        (
            "time_semantics",
            f"select count(*) from {V} where visit_type = 'ZY' and {Q1}",
            f"select count(*) from {V} where visit_type = 'ZY' and ryrq >= '2024-01-01' and ryrq < '2024-04-01'",
            "discharges counted by admission time",
        ),
        (
            "time_semantics",
            f"select count(*) from {L} l where l.cysj >= '2023-01-01'",
            f"select count(*) from {L} l where l.report_time >= '2023-01-01'",
            "labs by report time, qualified column keeps its table",
        ),
        (
            "time_semantics",
            f"select count(*) from {V} where ryrq < '2024-04-01' and (cyrq >= '2024-01-01' or cyrq is null)",
            f"select count(*) from {V} where ghrq < '2024-04-01' and (ryrq >= '2024-01-01' or ryrq is null)",
            "every time column at once, swapped not chained (cyrq->ryrq does not go on to ghrq)",
        ),
        ("time_semantics", "select min(zdsj) from emr.t_diag_record", None, "no time column with a naive counterpart"),
        (
            "null_semantics",
            f"select avg(result_value) from {L} where bgzt = 'F' and result_value is not null",
            f"select avg(coalesce(result_value, 0)) from {L} where bgzt = 'F'",
            "rows without a valid result counted, and averaged as 0",
        ),
        (
            "null_semantics",
            f"select count(*) from {V} where visit_type = 'ZY' and ryrq < '2024-04-01' and (cyrq >= '2024-01-01' or cyrq is null)",
            f"select count(*) from {V} where visit_type = 'ZY' and ryrq < '2024-04-01' and (cyrq >= '2024-01-01')",
            "still admitted: the IS NULL branch of an OR never holds",
        ),
        (
            "null_semantics",
            f"select count(*) from {V} where visit_type = 'ZY' and cyrq is null",
            f"select count(*) from {V} where false",
            "current inpatients: a conjunct that never holds empties the WHERE",
        ),
        (
            "null_semantics",
            f"select count(*) filter (where result_value is null) as no_result, count(*) as n from {L}",
            f"select count(*) filter (where false) as no_result, count(*) as n from {L}",
            "'no valid result' counts nothing when nothing is NULL",
        ),
        (
            "null_semantics",
            f"select count(*) from emr.t_patient_info p where not exists (select 1 from {L} l where l.patient_id = p.patient_id)",
            f"select count(*) from emr.t_patient_info p where not exists (select 1 from {L} l where l.patient_id = p.patient_id and l.result_value is not null)",
            "'never tested' read as 'no valid result'",
        ),
        ("null_semantics", f"select count(*) from {V} where visit_type = 'MZ'", None, "no NULL handling to drop"),
        (
            "unit",
            f"select round(avg(case when unit = 'mg/dL' then result_value / 18.0 else result_value end), 2) from {L}",
            f"select round(avg(result_value), 2) from {L}",
            "the conversion CASE becomes the raw value",
        ),
        (
            "unit",
            f"select count(*) from {L} where (unit = 'mg/dL' and result_value >= 140) or (unit <> 'mg/dL' and result_value >= 7.8)",
            f"select count(*) from {L} where (result_value >= 140) or (result_value >= 7.8)",
            "thresholds per unit lose their unit conditions",
        ),
        ("unit", f"select avg(result_value) from {L} where xmdm = 'HBA1C'", None, "no unit handling"),
        (
            "soft_delete",
            f"select count(*) from {L} where bgzt = 'F'",
            f"select count(*) from {L}",
            "cancelled reports counted; an emptied WHERE goes",
        ),
        (
            "soft_delete",
            f"select count(*) filter (where bgzt = 'C') as cancelled from {L} where xmdm = 'GLU'",
            f"select count(*) as cancelled from {L} where xmdm = 'GLU'",
            "an aggregate FILTER on the status goes with it",
        ),
        (
            "soft_delete",
            f"select count(*) from {V} v where not exists (select 1 from {M} m where m.visit_id = v.visit_id and m.zfbz = 0)",
            f"select count(*) from {V} v where not exists (select 1 from {M} m where m.visit_id = v.visit_id)",
            "voided orders count inside a NOT EXISTS",
        ),
        ("soft_delete", f"select count(*) from {L} where xmdm = 'GLU'", None, "the SQL already lacks the filter"),
        (
            "dictionary_code",
            f"select d.ksmc, count(*) from {V} v join emr.dict_dept d on d.ksdm = v.ksdm where v.visit_type = 'ZY' and d.ty_bz = 0 and d.lcks_bz = 1 group by d.ksmc",
            f"select d.ksmc, count(*) from {V} v join emr.dict_dept d on d.ksdm = v.ksdm group by d.ksmc",
            "retired department, non-clinical departments and outpatient visits all counted",
        ),
        (
            "dictionary_code",
            "select count(*) filter (where xb = 1) as male, count(*) filter (where xb in (0, 9) or xb is null) as unknown from emr.t_patient_info",
            "select count(*) as male, count(*) as unknown from emr.t_patient_info",
            "sex codes unread; a dropped disjunct makes the whole OR hold",
        ),
        (
            "dictionary_code",
            f"select count(*) from {V} where ksdm in (select ksdm from emr.dict_dept where ty_bz = 0)",
            f"select count(*) from {V} where ksdm in (select ksdm from emr.dict_dept)",
            "the coded condition inside a subquery goes, the IN that holds it stays",
        ),
        (
            "dictionary_code",
            f"select count(*) from {V} where ksdm = '0201'",
            None,
            "the department code is the subject",
        ),
        ("soft_delete", "select from where", None, "SQL that does not parse is not applicable, with the reason"),
    ],
)
def test_each_mutation_rewrites_as_intended(tag: str, gold: str, expected: str | None, why: str) -> None:
    m = mutate(gold, tag)
    if expected is None:
        assert m.sql is None and m.reason and not m.changes, why
        return
    assert m.sql is not None and m.changes, why
    assert fingerprint.normalized(m.sql) == fingerprint.normalized(expected), why


@pytest.mark.parametrize(
    ("kind", "sql", "present", "absent", "why"),
    [
        ("wrong_time_field", f"select count(*) from {V} where {Q1}", "ryrq", "cyrq", "the time_semantics rewrite"),
        ("dropped_null_handling", f"select count(*) from {V} where zyts is not null", "t_zy_visit", "null", "null"),
        (
            "wrong_column",
            f"select count(distinct l.patient_id) from {L} l",
            "count(*)",
            "distinct",
            "rows, not patients",
        ),
    ],
)
def test_perturbations_are_the_trap_rewrites(kind: str, sql: str, present: str, absent: str, why: str) -> None:
    out = perturb_sql(sql, kind).lower()
    assert present in out and absent not in out, why


@pytest.mark.parametrize(
    ("kind", "sql", "why"),
    [
        ("wrong_time_field", "select count(*) from emr.t_patient_info", "not applicable: the text itself, untouched"),
        ("extra_calls", f"select count(*) from {V} where {Q1}", "not a SQL rewrite"),
        ("no_such_kind", f"select count(*) from {V} where {Q1}", "unknown kinds change nothing"),
    ],
)
def test_perturbation_leaves_sql_alone(kind: str, sql: str, why: str) -> None:
    assert perturb_sql(sql, kind) == sql, why


def test_every_tag_is_a_trap_or_declared_not_one() -> None:
    tags = set(get_args(Tag))
    assert set(TRAP_TAGS) <= tags and not set(TRAP_TAGS) & traps.NON_TRAP_TAGS
    assert tags == set(TRAP_TAGS) | traps.NON_TRAP_TAGS  # a new tag must be classified here


@pytest.mark.parametrize(
    ("version", "held"),
    [("v1", False), ("v3", False), ("v4", True), ("v10", True), ("draft", False)],
    ids=["v1-old", "v3-old", "v4-from-here", "v10-numeric-not-text", "not-a-version"],
)
def test_bites_are_required_from_v4(version: str, held: bool) -> None:
    assert traps.TRAP_BITE_REQUIRED_FROM == "v4"
    assert traps.required(version) is held


def test_every_committed_mutation_is_one_read_only_query() -> None:
    for task in release.load(TASKS_DIR, "v3").tasks + release.load(TASKS_DIR, "v4").tasks:
        for tag in set(task.tags) & set(TRAP_TAGS):
            for sql in task.gold_sql:
                m = mutate(sql, tag)
                assert m.sql is None or fingerprint.is_single_select(m.sql), (task.id, tag)


def test_the_perturbation_agent_sends_the_mutation() -> None:
    task = Task.model_validate(task_dict(gold_sql=[f"select count(*) from {V} where {Q1}"]))
    sent = [
        args["sql"]
        for step in perturbation_policy(task, "wrong_time_field").script
        for n, args in step
        if n == "execute_sql"
    ]
    assert sent == [mutate(task.gold_sql[0], "time_semantics").sql]


def test_a_tagged_task_without_gold_is_not_applicable_not_passed() -> None:
    task = Task.model_validate(task_dict(answerable=False, gold_sql=[], tags=["unanswerable", "soft_delete"]))
    [outcome] = traps.measure([task], golds=None)  # type: ignore[arg-type]  # nothing is run
    assert outcome.status == "not_applicable" and "no gold SQL" in outcome.detail


# ------------------------------------------------------------------ on the test world


def _task(tid: str, sql: str, tags: list[str], **overrides: Any) -> Task:
    return Task.model_validate(task_dict(id=f"st-{tid}-001", gold_sql=[sql], tags=tags, **overrides))


def _per_variant(tid: str) -> Task:
    """Colloquial variants ask only for every report; the others also for the final ones."""
    d = task_dict()
    for v in d["variants"]:
        v["asks"] = ["all_reports"] if v["complexity"] == "colloquial" else ["final_reports", "all_reports"]
    outputs = [{"name": c, "meaning": {"zh": c, "en": c}, "column": c} for c in ("final_reports", "all_reports")]
    sql = f"select count(*) filter (where bgzt = 'F') as final_reports, count(*) as all_reports from {L}"
    return _task(tid, sql, ["soft_delete"], format_version=2, outputs=outputs, variants=d["variants"])


WORLD = [
    (_task("cancelled", f"select count(*) as n from {L} where bgzt = 'F'", ["soft_delete"]), "bites"),
    (_task("nulls", f"select count(*) as n from {L} where result_value is not null", ["null_semantics"]), "bites"),
    (
        _task(
            "inpatients",
            f"select count(*) as n from {V} where visit_type = 'ZY' and extract(isodow from cyrq) in (6, 7)",
            ["time_semantics"],
        ),
        "bites",
    ),
    (_task("futile", f"select count(*) as n from {L} where bgzt in ('F', 'C')", ["soft_delete"]), "does_not_bite"),
    (_task("nofilter", f"select count(*) as n from {L} where xmdm = 'GLU'", ["soft_delete"]), "not_applicable"),
    (_task("badswap", "with x as (select 1 as cyrq) select cyrq from x", ["time_semantics"]), "error"),
    (_per_variant("pervariant"), "does_not_bite"),
]
WHY = {
    "cancelled": "cancelled reports exist in every test world",
    "nulls": "lab rows without a valid result exist",
    # hundreds of stays in any world: not one boundary that a key's shifts may leave no stay across
    "inpatients": "the stays discharged on a weekend are not those admitted on one",
    "futile": "a broken trap: the status filter keeps every status, so dropping it changes nothing",
    "nofilter": "a broken trap: the SQL already lacks the filter, so there is nothing to mutate",
    "badswap": "a mutation that does not run is reported as such, not as a bite",
    "pervariant": "the colloquial variants ask only for the column the trap does not change",
}


def test_traps_bite_where_they_should(synced: SyncReport, generated: Settings) -> None:
    from evalpkg.testset.validate import discrimination

    with gold_runner(generated) as golds:
        outcomes, _ = discrimination(golds, [t for t, _ in WORLD])
    got = {o.task_id.split("-")[1]: o for o in outcomes}
    for task, expected in WORLD:
        key = task.id.split("-")[1]
        assert got[key].status == expected, (WHY[key], got[key].line())
    assert "variants zh/colloquial, en/colloquial" in got["pervariant"].detail
    assert "n/a" in traps.rates(outcomes)["soft_delete"].summary()


def test_findings_are_held_in_a_reference_world_from_v4_on_and_reported_elsewhere(
    synced: SyncReport, generated: Settings, tmp_path: Path
) -> None:
    # no stay before 1900 in any world: a gold the data leaves without rows, not one the task got wrong
    empty = _task("nostay", f"select ksdm, count(*) as n from {V} where ryrq < '1900-01-01' group by ksdm", [])
    tasks = [t for t, _ in WORLD[:5]] + [empty]
    for version in ("v3", "v4"):
        release.write(tmp_path, version, tasks, "snap", release.ChangeSet(added={t.id: "test" for t in tasks}))
    settings = generated.model_copy(update={"tasks_dir": tmp_path})
    old = validate(settings, "v3", min_tasks=1, hold_findings=True)
    anywhere = validate(settings, "v4", min_tasks=1)
    held = validate(settings, "v4", min_tasks=1, hold_findings=True)
    for report, why in ((old, "v1..v3 are immutable"), (anywhere, "another snapshot than the reference worlds")):
        assert "soft_delete 50% (1/2, 1 n/a)" in report.summary() and "reported only" in report.summary(), why
        assert not [p for p in report.problems if p.startswith(("gold ", "trap ", "premise ")) or "nostay" in p], why
        gold = [p for p in report.findings() if p.startswith("gold ")]
        assert [p.split(": ")[1] for p in gold] == [
            "gold #1 returns no rows (neither result.empty_expected nor notes saying fewer rows are expected)",
            "undetermined answer_points[0] (row 0, col 0)",
        ], why
        assert "2 gold and 0 premise finding(s)" in report.summary(), why
    failing = [p for p in held.problems if p.startswith(("gold ", "trap ", "premise "))]
    assert failing == held.findings() and len([p for p in failing if p.startswith("trap ")]) == 2
    assert len([p for p in failing if p.startswith("gold st-nostay-001: ")]) == 2
    assert any("st-futile-001 [soft_delete] does not bite" in p for p in failing)
    assert any("st-nofilter-001 [soft_delete] not applicable" in p for p in failing)
    assert "(failing)" in held.summary()


def test_committed_v3_reports_rates_without_failing(synced: SyncReport, generated: Settings) -> None:
    report = validate(generated, "v3", hold_findings=True)
    assert report.problems == [], report.problems[:3]
    rates = traps.rates(report.trap_outcomes)
    assert {tag for tag, r in rates.items() if r.tasks} == set(TRAP_TAGS)
    assert all(0 < r.bites <= r.applicable for r in rates.values())
    assert any(o.status != "bites" for o in report.trap_outcomes)  # v3 has traps that do not bite: reported
    assert "trap bite rate" in report.summary() and "reported only" in report.summary()
