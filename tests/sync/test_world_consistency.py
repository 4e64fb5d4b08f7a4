"""The world contradicts itself nowhere analysts looked: death is terminal, a final report waits at most
7 days for its report time, 儿科 sees children, and the age group follows the birth year.

Each rule is checked three ways: on the generator's output (no database), by its eval_db.json
expectation on the synced eval DB, and by that expectation failing on a copy of the eval DB broken
on purpose (scratch schemas emr__broken / meta__broken, which validate_eval_db reads with its suffix)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from evalpkg.db import connect
from evalpkg.errors import SyncError
from evalpkg.prod.clinical import MAX_REPORT_WAIT_H
from evalpkg.prod.encounters import PEDIATRIC_AGE, PEDIATRICS
from evalpkg.prod.generator import DEFAULT_AS_OF, SNAPSHOT_LAG, World, draw
from evalpkg.prod.terminal import after_death
from evalpkg.settings import EVAL_DB, Settings
from evalpkg.sync.dbt import run_dbt
from evalpkg.sync.runner import SyncReport
from evalpkg.sync.validate import validate_eval_db
from tests.conftest import SMALL_WORLD_PATIENTS, TEST_SEED

# The suite's batches that guard the world's consistency, one per rule.
DEATH, REPORT_WAIT, PEDIATRIC, AGE_GROUP = (
    "death_is_terminal",
    "final_reports_awaiting_report_time",
    "pediatrics_sees_children",
    "age_group_follows_birth_year",
)
SUFFIX = "__broken"
COPIED = [("emr", "t_patient_info"), ("emr", "t_zy_visit"), ("emr", "t_lab_result"), ("meta", "snapshot")]


# --- (c) the generator's output, in memory -------------------------------------------------------


@pytest.fixture(scope="module")
def world() -> World:
    return draw(SMALL_WORLD_PATIENTS, TEST_SEED)


def _nothing_after_death(w: World) -> int:
    return int(after_death(w.visits, len(w.patients)).sum())


def _adult_pediatric_visits(w: World) -> int:
    v = w.visits
    age = (v.admitted.astype("datetime64[D]") - w.patients.birth[v.patient]).astype(int) / 365.25
    return int(((v.dept == PEDIATRICS) & (age >= PEDIATRIC_AGE)).sum())


def _reports_pending_too_long(w: World) -> int:
    lab = w.labs
    end = np.datetime64(DEFAULT_AS_OF + SNAPSHOT_LAG, "s") + np.timedelta64(86399, "s")
    pending = ~lab.cancelled & np.isnat(lab.reported)
    return int((pending & (lab.executed < end - np.timedelta64(MAX_REPORT_WAIT_H, "h"))).sum())


@pytest.mark.parametrize(
    ("count", "why"),
    [
        pytest.param(_nothing_after_death, "nothing starts or ends after a first death discharge", id="death"),
        pytest.param(_adult_pediatric_visits, "儿科 sees no one aged 14 or over at the visit", id="pediatrics"),
        pytest.param(_reports_pending_too_long, "a final report lacks its time only in the last 7 days", id="wait"),
    ],
)
def test_generated_world_has_no_contradiction(world: World, count: Callable[[World], int], why: str) -> None:
    assert count(world) == 0, why


def test_generator_keeps_its_traps_while_removing_contradictions(world: World) -> None:
    assert world.dropped_after_death > 0  # the default world did draw visits after a death
    died = (world.visits.discharge_way == 5).sum()
    assert died > 0, "deaths stay in the world (the cyfs = 5 tasks need them)"
    # Final reports without a report time (the NULL report_time trap) are those released after the
    # snapshot's "now", made by the sync: test_synced_world_meets_the_consistency_expectations counts them.
    assert (world.visits.dept == PEDIATRICS).sum() > 0, "children are still seen in 儿科"
    # rows of the dropped visits went with them: every row points at a kept visit
    for rows in (world.diagnoses, world.labs, world.orders):
        assert rows.visit.max() < len(world.visits)


# --- (a) the synced eval DB meets the expectations --------------------------------------------------


def _suite_of(tmp_path: Path, settings: Settings, *batches: str) -> Path:
    """eval_db.json cut down to the named batches, so a check runs (and fails) only on its own rule."""
    suite = json.loads((settings.expectations_dir / "eval_db.json").read_text(encoding="utf-8"))
    suite["batches"] = [b for b in suite["batches"] if b["name"] in batches]
    assert [b["name"] for b in suite["batches"]] == list(batches)
    path = tmp_path / "eval_db.json"
    path.write_text(json.dumps(suite, ensure_ascii=False), encoding="utf-8")
    return path


def test_synced_world_meets_the_consistency_expectations(
    synced: SyncReport, generated: Settings, tmp_path: Path
) -> None:
    report = validate_eval_db(generated, _suite_of(tmp_path, generated, DEATH, REPORT_WAIT, PEDIATRIC, AGE_GROUP))
    assert report.success and report.evaluated == 4
    with connect(generated.db_url(EVAL_DB)) as ev:
        counts = ev.execute(
            "select (select count(*) from emr.t_zy_visit where cyfs = 5), "
            "(select count(*) from emr.t_lab_result where bgzt = 'F' and report_time is null), "
            "(select count(*) from emr.t_zy_visit where ksdm = '0401')"
        ).fetchone()
    # each rule has rows to bite on, but the report-wait rule: pending reports at "now" are few and a key may
    # leave none (test_world_near_now breaks that rule on purpose)
    assert counts is not None and counts[0] > 0 and counts[2] > 0, counts


# --- (b) each expectation fails on a world broken on purpose -----------------------------------------


@pytest.fixture
def broken(synced: SyncReport, generated: Settings) -> Iterator[Settings]:
    """Fresh copies of the tables the rules read, in scratch schemas dropped afterwards."""
    with connect(generated.db_url(EVAL_DB)) as ev:
        for schema in {s for s, _ in COPIED}:
            ev.execute(f"drop schema if exists {schema}{SUFFIX} cascade")
            ev.execute(f"create schema {schema}{SUFFIX}")
        for schema, table in COPIED:
            ev.execute(f"create table {schema}{SUFFIX}.{table} as select * from {schema}.{table}")
    try:
        yield generated
    finally:
        with connect(generated.db_url(EVAL_DB)) as ev:
            for schema in {s for s, _ in COPIED}:
                ev.execute(f"drop schema if exists {schema}{SUFFIX} cascade")


V, P, L = (f"emr{SUFFIX}.{t}" for t in ("t_zy_visit", "t_patient_info", "t_lab_result"))
S = f"meta{SUFFIX}.snapshot"
# A discharged stay of a patient seen again later, which DIES turns into a death.
STAY_BEFORE_ANOTHER_VISIT = (
    f"select a.visit_id from {V} a join {V} b using (patient_id) "
    "where a.visit_type = 'ZY' and a.cyrq is not null and b.ryrq > a.cyrq order by a.visit_id limit 1"
)
DIES = f"update {V} set cyfs = 5 where visit_id = ({STAY_BEFORE_ANOTHER_VISIT})"
# A death of the synced world, its oldest final report, and a final report the breaks cannot move.
A_DEATH = f"select * from {V} where cyfs = 5 order by cyrq limit 1"
OLDEST_REPORT = f"select lab_id from {L} where bgzt = 'F' and report_time is not null order by exec_time limit 1"
A_REPORT = f"select min(lab_id) from {L} where bgzt = 'F'"


@pytest.mark.parametrize(
    ("batch", "expectation", "breaks"),
    [
        pytest.param(
            DEATH,
            "expect_table_row_count_to_equal",
            [DIES],
            id="death-a-patient-seen-again-after-dying",
        ),
        pytest.param(
            DEATH,
            "expect_table_row_count_to_equal",
            [
                f"insert into {V} (visit_id, patient_id, visit_type, ksdm, ghrq, ryrq) "
                f"select 'Vopen', patient_id, 'ZY', ksdm, ghrq, ryrq from ({A_DEATH}) d",
            ],
            id="death-a-stay-still-open-after-the-patient-died-in-another",
        ),
        pytest.param(
            REPORT_WAIT,
            "expect_column_values_to_be_between",
            [f"update {L} set report_time = null where lab_id = ({OLDEST_REPORT})"],
            id="report-wait-a-final-report-from-the-first-year-never-reported",
        ),
        pytest.param(
            REPORT_WAIT,
            "expect_column_values_to_be_between",
            [
                # executed 30 days before the snapshot (well within the largest shift), not reported,
                # and the patient seen again 10 days later: the wait shows against the patient's own dates
                f"update {L} set report_time = null, exec_time = (select pinned_now from {S}) - interval '30 days' "
                f"where lab_id = ({A_REPORT})",
                f"insert into {V} (visit_id, patient_id, visit_type, ksdm, ghrq, ryrq) "
                f"select 'Vlater', patient_id, 'MZ', '0601', exec_time + interval '10 days', "
                f"exec_time + interval '10 days' from {L} where lab_id = ({A_REPORT})",
            ],
            id="report-wait-still-pending-when-the-patient-came-back-10-days-later",
        ),
        pytest.param(
            PEDIATRIC,
            "expect_column_values_to_be_between",
            [
                f"update {V} set ksdm = '0401' where visit_id = (select v.visit_id from {V} v join {P} p "
                "using (patient_id) where extract(year from v.ryrq) - p.csnf between 30 and 60 limit 1)"
            ],
            id="pediatrics-an-adult-seen-in-pediatrics",
        ),
        pytest.param(
            PEDIATRIC,
            "expect_column_values_to_be_between",
            [
                f"update {V} set ksdm = '0401' where visit_id = (select v.visit_id from {V} v join {P} p "
                "using (patient_id) where p.csnf is null limit 1)"
            ],
            id="pediatrics-a-patient-over-89-without-birth-year-seen-in-pediatrics",
        ),
        pytest.param(
            AGE_GROUP,
            "expect_column_pair_values_to_be_equal",
            [
                f"update {P} set nlfz = '45-64' where patient_id = (select patient_id from {P} p, {S} s "
                "where extract(year from s.pinned_date) - p.csnf = 65 limit 1)"
            ],
            id="age-group-from-the-true-age-not-the-age-the-birth-year-shows",
        ),
        pytest.param(
            AGE_GROUP,
            "expect_column_pair_values_to_be_equal",
            [
                f"update {P} set csnf = extract(year from (select pinned_date from {S}))::int - 90 "
                f"where patient_id = (select patient_id from {P} where nlfz = '65-89' limit 1)"
            ],
            id="age-group-a-birth-year-showing-90-kept-in-65-89",
        ),
        pytest.param(
            AGE_GROUP,
            "expect_column_pair_values_to_be_equal",
            [
                f"update {P} set csnf = extract(year from (select pinned_date from {S}))::int - 85 "
                f"where patient_id = (select patient_id from {P} where nlfz = '90+' limit 1)"
            ],
            id="age-group-90-plus-with-a-birth-year-showing-85",
        ),
    ],
)
def test_expectation_fails_on_a_broken_world(
    broken: Settings, tmp_path: Path, batch: str, expectation: str, breaks: list[str]
) -> None:
    suite = _suite_of(tmp_path, broken, batch)
    assert validate_eval_db(broken, suite, suffix=SUFFIX).success  # the copy passes before the break
    with connect(broken.db_url(EVAL_DB)) as ev:
        for statement in breaks:
            assert ev.execute(statement).rowcount == 1, statement  # each break touches exactly one row
    with pytest.raises(SyncError, match=rf"first failure: {batch}: {expectation}"):
        validate_eval_db(broken, suite, suffix=SUFFIX)


def test_dbt_data_test_catches_an_age_group_that_disagrees_with_the_birth_year(
    synced: SyncReport, generated: Settings
) -> None:
    """The same rule as a dbt data test (it gates every dbt build): the group the true age gave before."""
    select = ("--select", "test_name:age_group_follows_birth_year")
    assert [r.status for r in run_dbt(generated, "test", *select)] == ["pass"]
    with connect(generated.db_url(EVAL_DB)) as ev:
        row = ev.execute(
            "select patient_id, nlfz from emr.t_patient_info p, meta.snapshot s "
            "where extract(year from s.pinned_date) - p.csnf = 65 order by patient_id limit 1"
        ).fetchone()
        assert row is not None
        ev.execute("update emr.t_patient_info set nlfz = '45-64' where patient_id = %s", (row[0],))
    try:
        with pytest.raises(SyncError, match=r"test age_group_follows_birth_year_t_patient_info"):
            run_dbt(generated, "test", *select)
    finally:
        with connect(generated.db_url(EVAL_DB)) as ev:
            ev.execute("update emr.t_patient_info set nlfz = %s where patient_id = %s", (row[1], row[0]))
