"""The words graders, classifier and clusterer share are defined once, and match the schema they describe."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("MONTH", "2024-01", True),
        ("MONTH", "2024-13", False),  # no month 13
        ("DAY", "2024-01-15", True),
        ("DAY", "2024-01", False),
        ("FIRST_OF_MONTH", "2024-03-01", True),
        ("FIRST_OF_MONTH", "2024-03-01 00:00:00+08", True),  # midnight with a zone: date_trunc's month
        ("FIRST_OF_MONTH", "2024-03-01T00:00:00.000Z", True),
        ("FIRST_OF_MONTH", "2024-03-02", False),  # a day, not a month
        ("FIRST_OF_MONTH", "2024-03-01 08:30:00", False),  # a time of day is an event, not a month
        ("QUARTER_START", "2024-04", True),
        ("QUARTER_START", "2024-05", False),
        ("TIME_VALUE", "2024", True),
        ("TIME_VALUE", "2024-03-05 10:00", True),
        ("TIME_VALUE", "2024-Q1", True),
        ("TIME_VALUE", "2024Q1", True),
        ("TIME_VALUE", "心血管内科", False),
        ("TIME_VALUE", "1024", False),  # not a year of the world
        ("CALENDAR_NAME", "visit_month", True),
        ("CALENDAR_NAME", "季度", True),
        ("CALENDAR_NAME", "discharge_date", False),  # a day is no calendar grouping
        ("TIME_KEY_NAME", "discharge_date", True),
        ("TIME_KEY_NAME", "week_start", True),
        ("TIME_KEY_NAME", "年份", True),
        ("TIME_KEY_NAME", "ryrq", False),  # the dictionary's suffixes are the tie rules' reach only
        ("TIME_KEY_NAME", "patients", False),
        ("TIME_NAME", "ryrq", True),
        ("TIME_NAME", "zdsj", True),
        ("TIME_NAME", "report_time", True),
        ("TIME_NAME", "rqs", False),  # a suffix, not a syllable anywhere
        ("TIME_NAME", "ksdm", False),
    ],
)
def test_raw_values_and_names(pattern: str, text: str, matches: bool) -> None:
    compiled: re.Pattern[str] = getattr(vocabulary, pattern)
    # as the callers read them: a name holds its words anywhere, a time value starts the text, a value is whole
    read = (
        compiled.search
        if pattern.endswith("_NAME")
        else compiled.match
        if pattern == "TIME_VALUE"
        else compiled.fullmatch
    )
    assert bool(read(text)) is matches


def test_the_name_vocabularies_nest() -> None:
    """A calendar word is a time key, and a time key a time column: one list of words, three reaches."""
    words = ["year", "quarter", "month", "年", "季", "月", "week", "day", "date", "period", "time"]
    for word in words:
        calendar, key, time = (
            bool(p.search(word)) for p in (vocabulary.CALENDAR_NAME, vocabulary.TIME_KEY_NAME, vocabulary.TIME_NAME)
        )
        assert time and (key or not calendar), word
