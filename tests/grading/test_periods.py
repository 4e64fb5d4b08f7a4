"""The one period vocabulary (evalpkg/grading/periods.py): every form it reads, a case per form with its reason
where the form is not plain."""

from __future__ import annotations

import re

import pytest

from evalpkg.grading import periods
from evalpkg.grading.labels import label_key
from evalpkg.grading.periods import period_ids


@pytest.mark.parametrize(
    ("text", "year", "expected"),
    [
        ("2024-01", None, {"month:2024-01"}),
        ("January 2024", None, {"month:2024-01"}),
        ("Jan_2024", None, {"month:2024-01"}),
        ("2024年1月", None, {"month:2024-01"}),
        ("2024-01-01", None, {"month:2024-01"}),
        ("2024-01-01 00:00:00", None, {"month:2024-01"}),
        ("2024-01-15", None, set()),
        ("1", "2024", {"month:2024-01"}),
        ("01", None, {"month:*-01"}),
        ("1月", "2024", {"month:2024-01"}),
        ("13", "2024", set()),
        ("2024-Q3", None, {"quarter:2024-Q3"}),
        ("Q3", "2024", {"quarter:2024-Q3"}),
        ("2024年第三季度", None, {"quarter:2024-Q3"}),
        ("male", None, set()),
    ],
)
def test_period_labels(text: str, year: str | None, expected: set[str]) -> None:
    assert period_ids(label_key(text), year) == expected


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
    compiled: re.Pattern[str] = getattr(periods, pattern)
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
            bool(p.search(word)) for p in (periods.CALENDAR_NAME, periods.TIME_KEY_NAME, periods.TIME_NAME)
        )
        assert time and (key or not calendar), word
