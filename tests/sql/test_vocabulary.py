"""The words graders, classifier and clusterer share are defined once, and match the schema they describe."""

from __future__ import annotations

import pytest

from evalpkg.db import connect
from evalpkg.grading import cross, execution
from evalpkg.pipeline import cluster
from evalpkg.settings import Settings
from evalpkg.sql import vocabulary
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import classify


def test_every_user_of_a_vocabulary_reads_the_one_definition() -> None:
    assert classify.TIME_COLUMNS is vocabulary.TIME_COLUMNS
    assert cluster.TIME_COLUMNS is vocabulary.TIME_COLUMNS
    assert execution.RATE is vocabulary.RATE and cross.RATE is vocabulary.RATE


def test_the_time_columns_are_the_eval_schemas_event_timestamps(synced: SyncReport, generated: Settings) -> None:
    with connect(generated.agent_url()) as conn:
        rows = conn.execute(
            "select column_name from information_schema.columns where table_schema = 'emr' "
            "and data_type like 'timestamp%' and column_name <> 'update_time'"
        ).fetchall()
    assert {r[0] for r in rows} == vocabulary.TIME_COLUMNS


@pytest.mark.parametrize(
    ("name", "rate", "why"),
    [
        ("visit_rate", True, "a snake_case word"),
        ("readmission rate", True, "a spaced word"),
        ("pct_female", True, "an abbreviation at the start"),
        ("percentage", True, "a word with its suffix"),
        ("shares", True, "a plural"),
        ("女性占比", True, "Chinese share"),
        ("复诊率", True, "Chinese rate"),
        ("moderate_cases", False, "'rate' inside another word"),
        ("separated_patients", False, "'rate' inside another word"),
        ("patients with a result above 7%", False, "a threshold in a count's meaning"),
        ("n", False, "a bare count"),
    ],
)
def test_rate_names(name: str, rate: bool, why: str) -> None:
    assert bool(vocabulary.RATE.search(name)) is rate, why


def test_a_percent_sign_makes_a_header_a_rate() -> None:
    assert vocabulary.is_rate_header("share %") and vocabulary.is_rate_header("%")
    assert not vocabulary.is_rate_header("patients")
