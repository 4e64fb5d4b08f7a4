"""Row labels read as the gold's own labels (relabel.py): each case names its reason. Values are not compared
here, only which gold label each row is; comparator.match compares them afterwards."""

from __future__ import annotations

from typing import Any

import pytest

from evalpkg.grading.comparator import match
from evalpkg.grading.relabel import relabelled

from .test_comparator_pivots import LABELS

Rows = list[list[Any]]
GOLD = [["心血管内科", 41, 8.44], ["内分泌科", 5, 11.4], ["消化内科", 5, 6.8]]
COLUMNS = ["ksmc", "discharges", "avg_los"]


@pytest.mark.parametrize(
    ("pred", "expected", "why"),
    [
        (
            [
                ["Cardiology (心血管内科)", 41, 8.44],
                ["Endocrinology (内分泌科)", 5, 11.4],
                ["Gastroenterology (消化内科)", 5, 6.8],
            ],
            True,
            "en name decorated with zh",
        ),
        (
            [["心血管内科 (0101)", 41, 8.44], ["内分泌科 (0102)", 5, 11.4], ["消化内科 (0104)", 5, 6.8]],
            True,
            "zh name decorated with code",
        ),
        ([["0101", 41, 8.44], ["0102", 5, 11.4], ["0104", 5, 6.8]], True, "codes"),
        ([["Cardiology", 41, 8.44], ["Endocrinology", 5, 11.4], ["Gastroenterology", 5, 6.8]], True, "en names"),
        ([*GOLD, ["骨科", 0, None]], True, "a group with nothing in it is neutral"),
        ([["Cardiology", 5, 11.4], ["Endocrinology", 41, 8.44], ["Gastroenterology", 5, 6.8]], False, "labels swapped"),
        ([*GOLD, ["骨科", 3, 7.0]], False, "an extra group with numbers is an extra row"),
        ([["Cardiology", 41, 8.44], ["Cardiology", 5, 11.4], ["Gastroenterology", 5, 6.8]], False, "one label twice"),
        ([["x", 41, 8.44], ["y", 5, 11.4], ["z", 5, 6.8]], False, "labels that name nothing"),
    ],
)
def test_labels_are_read_as_the_golds(pred: Rows, expected: bool, why: str) -> None:
    rows = relabelled(pred, COLUMNS, GOLD, COLUMNS, LABELS)
    assert (rows is not None and match(rows, GOLD)) is expected, why


def test_a_quarter_labelled_by_its_first_month() -> None:
    gold, pred = [["2025-07", 11.08, 7.3]], ["quarter", "prev", "cur"]
    assert relabelled([["2025-Q3", 11.08, 7.3]], pred, gold, ["quarter_start", "prev", "cur"], LABELS) == gold
    assert relabelled([["2025-Q2", 11.08, 7.3]], pred, gold, ["quarter_start", "prev", "cur"], LABELS) is None
    assert relabelled([["2025-Q3", 11.08, 7.3]], pred, gold, ["month", "prev", "cur"], LABELS) is None  # a month


@pytest.mark.parametrize(
    ("pred", "columns", "expected", "why"),
    [
        ([["2025-01-01", 254], ["2025-04-01", 226]], ["quarter_start", "tests"], True, "first days for numbers"),
        ([["2025-01", 254], ["2025-04", 226]], ["quarter", "tests"], True, "first months for numbers"),
        ([["2025-Q1", 254], ["2025-Q2", 226]], ["quarter", "tests"], True, "quarters by name"),
        ([["2025-04-01", 254], ["2025-01-01", 226]], ["quarter_start", "tests"], False, "quarters swapped"),
        ([["2025-01-01", 254], ["2025-04-01", 226]], ["day", "tests"], False, "days in a column not of quarters"),
        ([["2025-01-15", 254], ["2025-04-15", 226]], ["quarter_start", "tests"], False, "no quarter starts"),
    ],
)
def test_quarters_numbered_by_the_gold(pred: Rows, columns: list[str], expected: bool, why: str) -> None:
    """A gold numbering its year's quarters 1-4 (extract(quarter ...)) is answered by the quarters' names or
    first days (v11 study seed 20261221, R01)."""
    gold = [[1, 254], [2, 226]]
    rows = relabelled(pred, columns, gold, ["quarter", "tests"], LABELS)
    assert (rows is not None and match(rows, gold)) is expected, why


def test_a_year_of_the_range_with_nothing_in_it() -> None:
    """Years are labels in a column named for them: 2020 with 0 stays is a year the question covers."""
    gold = [[2021, 7], [2022, 6]]
    pred = [[2020, 0], [2021, 7], [2022, 6]]
    assert relabelled(pred, ["year", "admissions"], gold, ["year", "admissions"], LABELS) == gold
    assert relabelled([[2020, 3], *pred[1:]], ["year", "admissions"], gold, ["year", "admissions"], LABELS) is None
    assert relabelled(pred, ["n", "admissions"], gold, ["n", "admissions"], LABELS) is None  # no period: no label


def test_a_top_n_keeps_its_n() -> None:
    """Where order matters, a zero row is a row: the gold's N is the answer's."""
    assert relabelled([*GOLD, ["骨科", 0, None]], COLUMNS, GOLD, COLUMNS, LABELS, limited=True) is None


TOTALLED = [["全院", 46, 8.6], *GOLD]


@pytest.mark.parametrize(
    ("label", "expected", "why"),
    [
        ("(Hospital-wide)", True, "summary words only, in parentheses: the gold's one total row"),
        ("All departments combined", True, "summary words only"),
        ("Entire hospital", True, "summary words only"),
        ("Total", True, "a total word"),
        ("Departments", False, "no word says 'all of it'"),
        ("Hospital A", False, "a word that is no summary word: a name, not a total"),
        ("Cardiology", False, "a department twice: names no total"),
    ],
)
def test_a_total_label_names_the_golds_total_row(label: str, expected: bool, why: str) -> None:
    pred = [[label, 46, 8.6], ["Cardiology", 41, 8.44], ["Endocrinology", 5, 11.4], ["Gastroenterology", 5, 6.8]]
    rows = relabelled(pred, COLUMNS, TOTALLED, COLUMNS, LABELS)
    assert (rows is not None and match(rows, TOTALLED)) is expected, why


def test_a_total_label_names_no_row_where_the_gold_has_two_totals() -> None:
    gold = [["全院", 46, 8.6], ["合计", 46, 8.6], *GOLD]
    pred = [["Hospital-wide", 46, 8.6], ["合计", 46, 8.6], *GOLD]
    assert relabelled(pred, COLUMNS, gold, COLUMNS, LABELS) is None


NAMES = [["心血管内科"], ["内分泌科"]]


@pytest.mark.parametrize(
    ("pred", "gold", "columns", "expected", "why"),
    [
        ([["Cardiology"], ["Endocrinology"]], NAMES, ["ksmc"], True, "a list of names, each in the other language"),
        (
            [["Cardiology"], ["Endocrinology"], ["骨科"]],
            NAMES,
            ["ksmc"],
            False,
            "a row with no number states its label: an extra name is an extra department, never a neutral row",
        ),
        (
            [[12, 64, "2018-02-01"]],
            [[12, 64, "2018-02-02"]],
            ["prev_admissions", "this_admissions", "first_admission"],
            False,
            "a day names no other day of its month: '2018-02-01' is also the month, but '2018-02-02' holds no month",
        ),
        (
            [["2018-02-02", 5]],
            [["2018-02-01", 5]],
            ["day", "admissions"],
            False,
            "nor the other way round: the day's own words hold the month only beside a number ('02')",
        ),
        ([["2018-02-01", 5]], [["2018-02", 5]], ["month", "admissions"], True, "the first of a month writes the month"),
        ([["Feb 2018", 5]], [["2018-02-01", 5]], ["month", "admissions"], True, "a month however written"),
    ],
)
def test_a_label_names_what_it_states(pred: Rows, gold: Rows, columns: list[str], expected: bool, why: str) -> None:
    rows = relabelled(pred, columns, gold, columns, LABELS)
    assert (match(pred, gold) or (rows is not None and match(rows, gold))) is expected, why
