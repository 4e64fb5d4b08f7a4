"""The comparator against a careful human grader on the tricky cases (grading/rules.py): every case names its reason,
and the cases that must fail are as many as the ones that must pass."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from evalpkg.grading import ties
from evalpkg.grading.comparator import COMPARATOR_VERSION, explain, match, order_key_columns, tie_groups
from evalpkg.grading.summary import additive_columns, unchecked_columns, without_summary_rows

GOLD = [[1, "a", 2.5], [1, "a", 2.5], [2, "b", None]]
Rows = list[list[Any]] | None


@pytest.mark.parametrize(
    ("pred", "expected", "why"),
    [
        (GOLD, True, "identical"),
        ([GOLD[2], GOLD[0], GOLD[1]], True, "row order does not matter without ORDER BY"),
        ([[r[2], r[0], r[1]] for r in GOLD], True, "column order does not matter"),
        ([[*r, "extra"] for r in GOLD], True, "an extra prediction column is accepted"),
        ([["x", r[2], 7, r[1], r[0]] for r in GOLD], True, "extra columns anywhere, columns permuted"),
        ([GOLD[0], GOLD[2]], False, "bags: a lost duplicate is an error"),
        ([GOLD[0], GOLD[0], GOLD[0], GOLD[2]], False, "bags: an extra duplicate is an error"),
        ([*GOLD, [3, "c", 1.0]], False, "an extra row is an error"),
        ([[1, "a", 2.5000000001], [1, "a", 2.4999999999], [2, "b", None]], True, "float noise within tolerance"),
        ([[1, "a", 2.51], [1, "a", 2.5], [2, "b", None]], False, "a value outside the tolerance"),
        ([[1.0, "a", 2.5], [1, "a", 2.5], [2.0, "b", None]], True, "an integral float is the same integer"),
        ([[1, "a", 2.5], [1, "a", 2.5], [2, "b", 0]], False, "NULL is not zero"),
        ([[1, "a", 2.5], [1, "a", 2.5], [2, "b", "None"]], False, "NULL is not the string None"),
        ([[1, "a", 2.5], [1, "a", 2.5], [2, "b", float("nan")]], False, "NULL is not NaN"),
        ([[1, "a"], [1, "a"], [2, "b"]], False, "a missing gold column"),
        ([[1, "a", 9.9], [1, "a", 9.9], [2, "b", None]], False, "a gold column's values are nowhere"),
        ([[1, "b", 2.5], [1, "a", 2.5], [2, "a", None]], False, "each column's values are right, the rows are not"),
        ([], False, "success-empty is not a match for a non-empty gold"),
        (None, False, "failure is never a match"),
    ],
)
def test_bag_semantics(pred: Rows, expected: bool, why: str) -> None:
    assert match(pred, GOLD) is expected, why


D = Decimal
BIG = 2**60


@pytest.mark.parametrize(
    ("pred", "gold", "rel_tol", "expected", "why"),
    [
        ([[1_000_001]], [[1_000_000]], 1e-6, False, "ids of a million differing by 1: integers are exact"),
        ([[1_000_001]], [[1_000_000]], 0.01, False, "integers are exact whatever the tolerance"),
        ([[BIG + 1]], [[BIG]], 1e-6, False, "integers beyond float precision stay exact"),
        ([[BIG]], [[BIG]], 1e-6, True, "the same large integer"),
        ([[10**400 + 1]], [[10**400]], 1e-6, False, "integers beyond float range stay exact"),
        ([[10**400]], [[10**400]], 1e-6, True, "and equal themselves"),
        ([[D("1000000")]], [[1_000_000]], 1e-6, True, "a scale-0 Decimal is an integer"),
        ([[1_000_001.0]], [[D("1000000")]], 1e-6, False, "a scale-0 Decimal gold compares exactly"),
        ([[2.9999999]], [[3]], 1e-6, False, "an integer gold is not met by a near float"),
        ([[3.0]], [[3]], 1e-6, True, "an integral float meets an integer gold"),
        ([[2]], [[2.0000001]], 1e-6, True, "a fractional gold is met within tolerance by an integer"),
        ([[2.5000000001]], [[D("2.50")]], 1e-6, True, "a fractional Decimal takes the tolerance"),
        ([[100.4]], [[100.0]], 0.01, True, "the task's relative tolerance, loose"),
        ([[100.4]], [[100.0]], 0.001, False, "the task's relative tolerance, strict"),
        ([[1e-12]], [[0.0]], 1e-6, True, "near zero an absolute floor applies"),
        ([[1e-3]], [[0.0]], 1e-6, False, "but only a tiny one"),
        ([[1.0000005], [1.0000015]], [[1.000001], [1.0]], 1e-6, True, "greedy pairing in gold order fails here"),
        ([[1.0000015], [1.0000005]], [[1.000001], [1.0]], 1e-6, True, "greedy trap, prediction rows reversed"),
        (
            [[1.0000009, 5.0], [1.0000001, 7.0]],
            [[1.0, 5.0], [1.0000008, 7.0]],
            1e-6,
            True,
            "sorted pairing fails here, a proper matching succeeds",
        ),
        (
            [[1.0000001, 7.0], [1.0000009, 5.0]],
            [[1.0, 5.0], [1.0000008, 7.0]],
            1e-6,
            True,
            "sorted pairing fails, prediction rows reversed",
        ),
        (
            [[1.0000009, 7.0], [1.0000001, 5.0]],
            [[1.0, 5.0], [1.0000030, 7.0]],
            1e-6,
            False,
            "no pairing puts every value within tolerance",
        ),
        (
            [[float("inf")], [float("nan")]],
            [[float("nan")], [float("inf")]],
            1e-6,
            True,
            "NaN and infinity equal themselves",
        ),
        ([[float("inf")]], [[1e308]], 1e-6, False, "infinity is not a large number"),
        # the question rarely says how to round: a grader reads the gold at a coarser prediction's decimals
        ([[12.371134020618557]], [[12.37]], 0.01, True, "a finer prediction: the ratio task's tolerance decides"),
        ([[12.3456]], [[12.35]], 1e-6, False, "a gold does not say it was rounded: a finer prediction is not"),
        ([[D("12.3")]], [[D("12.34")]], 1e-6, True, "one decimal where the gold has two"),
        ([[D("12.3")]], [[D("12.3456789012345679")]], 1e-6, True, "one decimal for an unrounded gold"),
        ([[D("12.4")]], [[D("12.34")]], 1e-6, False, "one decimal, wrongly rounded"),
        ([[D("0.1")]], [[D("0.12")]], 1e-6, False, "one significant figure is too coarse to say 0.12"),
        ([[D("0.1")], [D("0.5")], [D("1.0")]], [[D("0.12")], [D("0.5")], [D("0.95")]], 1e-6, False, "nor 0.95"),
        ([[D("0.8")], [D("6.5")]], [[D("0.79")], [D("6.54")]], 1e-6, True, "0.8% for 0.79% beside 6.54%"),
        ([[D("0.0")], [D("45.7")]], [[D("0.04")], [D("45.65")]], 1e-6, False, "nor is 0.0 for 0.04"),
        (
            [[D("0.7")]],
            [[D("0.71")]],
            1e-6,
            False,
            "0.7 may be a computed 0.70: one significant figure says too little",
        ),
        ([[71]], [[D("71.11")]], 0.01, False, "a count never stands for a percentage, within tolerance or not"),
        ([[D("71.1")]], [[D("71.11")]], 0.01, True, "the percentage itself, coarser"),
        ([[7]], [[D("7.0")]], 1e-6, True, "a whole number for a fractional column that holds whole values"),
        ([[D("12")]], [[D("12.34")]], 1e-6, False, "an integer for a fraction stays exact"),
        ([[D("12.3")], [D("45.7")]], [[D("12.35")], [D("45.65")]], 1e-6, True, "a gold on a half rounds either way"),
        ([[D("12.3")], [D("12.4")]], [[D("12.35")], [D("12.35")]], 1e-6, True, "each half on its own"),
        ([[D("12.3")], [D("12.3")]], [[D("12.35")], [D("12.46")]], 1e-6, False, "but not a value off the half"),
        ([[D("12.5")]], [[D("12.35")]], 1e-6, False, "a half is not a licence for any value"),
        ([[None], [D("3.3")]], [[None], [D("3.33")]], 1e-6, True, "NULLs stay where they are"),
        ([[None], [D("3.3")]], [[D("3.33")], [None]], 1e-6, True, "in any row order"),
    ],
)
def test_numbers(pred: Rows, gold: list[list[Any]], rel_tol: float, expected: bool, why: str) -> None:
    assert match(pred, gold, rel_tol=rel_tol) is expected, why


MONTHS_2024 = [["2024-01", 5], ["2024-02", 7], ["2024-03", 9]]


@pytest.mark.parametrize(
    ("pred", "gold", "expected", "why"),
    [
        ([[1, 5], [2, 7], [3, 9]], MONTHS_2024, True, "month numbers name the gold's months within one year"),
        ([[1.0, 5], [2.0, 7], [3.0, 9]], MONTHS_2024, True, "month numbers as floats (a numeric extract)"),
        (MONTHS_2024, [[1, 5], [2, 7], [3, 9]], True, "labels of one year meet a gold of month numbers"),
        ([[12, 5], [1, 7]], [["2023-12", 5], ["2024-01", 7]], False, "month numbers cannot name months of two years"),
        ([["2024-12", 5], ["2025-01", 7]], [[12, 5], [1, 7]], False, "labels of two years do not meet month numbers"),
        ([["2020-Q1", 85], ["2020-Q2", 85], ["2020-Q3", 101]], [[1, 85], [2, 85], [3, 101]], True, "quarter labels"),
        ([["Q1", 85], ["Q2", 85]], [[1, 85], [2, 85]], True, "quarters without their year"),
        ([["2020年第一季度", 85], ["2020年第二季度", 85]], [[1, 85], [2, 85]], True, "quarters in Chinese"),
        ([["2020-Q1", 85], ["2020-Q2", 86]], [[1, 85], [2, 85]], False, "a quarter's number still counts"),
        ([["2020-Q1", 85], ["2021-Q2", 85]], [[1, 85], [2, 85]], False, "quarters of two years are not numbers"),
        ([["Jan 2024", 5], ["Feb 2024", 7], ["Mar 2024", 9]], MONTHS_2024, True, "months spelt another way"),
        ([["Q1", 5], ["Q2", 7], ["Q3", 9]], MONTHS_2024, False, "quarters are not months"),
        ([[dt.date(2024, m, 1), v] for m, v in ((1, 5), (2, 7), (3, 9))], MONTHS_2024, True, "a date on the 1st"),
        ([[f"2024-0{m}-01", v] for m, v in ((1, 5), (2, 7), (3, 9))], MONTHS_2024, True, "the executor's date text"),
        (
            [[dt.datetime(2024, m, 1), v] for m, v in ((1, 5), (2, 7), (3, 9))],
            MONTHS_2024,
            True,
            "a timestamp at midnight on the 1st",
        ),
        (
            [[f"2024-0{m}-01 00:00:00+08:00", v] for m, v in ((1, 5), (2, 7), (3, 9))],
            MONTHS_2024,
            True,
            "the executor's timestamptz text at midnight on the 1st",
        ),
        ([["2024-01", 5], ["2024-02", 7], ["2024-04", 9]], MONTHS_2024, False, "a wrong period"),
        ([[1, 5], [2, 7], [4, 9]], MONTHS_2024, False, "a wrong month number"),
        ([[dt.date(2024, 1, 2), 5], ["2024-02", 7], ["2024-03", 9]], MONTHS_2024, False, "a date not on the 1st"),
        ([[dt.datetime(2024, 1, 1, 8), 5], ["2024-02", 7], ["2024-03", 9]], MONTHS_2024, False, "not at midnight"),
        ([[1, 5], [2, 7], [3, 9]], [[1, 5], [2, 7], [3, 9]], True, "month numbers against month numbers"),
        ([[True], [False]], [["t"], ["f"]], True, "booleans meet 't'/'f'"),
        ([["true"], ["false"]], [[True], [False]], True, "'true'/'false' meet booleans"),
        ([[True], [True]], [["t"], ["f"]], False, "a wrong boolean"),
        ([[1], [0]], [[True], [False]], False, "a boolean is not an integer"),
        ([[" a "], ["b\u3000"]], [["a"], ["b"]], True, "text is trimmed, full-width spaces included"),
        ([["ＡＢＣ１"]], [["ABC1"]], True, "text is NFKC-normalised"),
        ([["abc"]], [["ABC"]], False, "case still matters"),
        ([[None]], [[""]], False, "NULL is not the empty string"),
        ([[None]], [[None]], True, "NULL equals NULL"),
        ([[D("1.5")]], [["1.5"]], False, "a number is not its text"),
    ],
)
def test_normalisation(pred: Rows, gold: list[list[Any]], expected: bool, why: str) -> None:
    assert match(pred, gold) is expected, why


@pytest.mark.parametrize(
    ("pred", "gold", "keys", "expected", "why"),
    [
        ([["y", 5], ["x", 5], ["z", 3]], [["x", 5], ["y", 5], ["z", 3]], [1], True, "a tie on the key may swap"),
        ([["z", 3], ["x", 5], ["y", 5]], [["x", 5], ["y", 5], ["z", 3]], [1], False, "reordered where order matters"),
        ([["y", 5], ["x", 5], ["z", 3]], [["x", 5], ["y", 5], ["z", 3]], None, False, "unknown keys: strict order"),
        (
            [[5, "y", 0], [5, "x", 0], [3, "z", 0]],
            [["x", 5], ["y", 5], ["z", 3]],
            [1],
            True,
            "order with extra columns",
        ),
        ([["x", 5.0000001], ["y", 4.9999999]], [["x", 5.0], ["y", 5.0]], [1], True, "a tie with float noise"),
        ([["x", 2.0], ["y", 1.0]], [["y", 1.0], ["x", 2.0]], [1], False, "ascending where the gold ascends"),
    ],
)
def test_order(pred: Rows, gold: list[list[Any]], keys: list[int] | None, expected: bool, why: str) -> None:
    assert match(pred, gold, order_matters=True, order_keys=keys) is expected, why


@pytest.mark.parametrize(
    ("kwargs", "reason", "why"),
    [
        ({"pred": GOLD, "truncated": True}, "truncated", "a truncated result is never compared as a sample"),
        ({"pred": None}, "no successful result", "failure"),
        ({"pred": [*GOLD, GOLD[0]]}, "4 rows, gold has 3", "row count"),
        ({"pred": [r[:2] for r in GOLD]}, "fewer columns", "missing column"),
        ({"pred": [[1, "a", 9.0], [1, "a", 9.0], [2, "b", None]]}, "gold column(s) [3]", "names the column"),
        (
            {"pred": [[1, "a", 1], [1, "a", 1], [2, "b", 1]], "gold": [[1, 1], [1, 1], [2, 2]]},
            "distinct",
            "two gold columns, one pred column",
        ),
        ({"pred": [GOLD[2], *GOLD[:2]], "order_matters": True}, "not in the gold's order", "order"),
        ({"pred": [[1, "b", 2.5], [1, "a", 2.5], [2, "a", None]]}, "rows differ", "rows"),
        ({"pred": GOLD}, "match", "a match"),
    ],
)
def test_explain_says_why(kwargs: dict[str, Any], reason: str, why: str) -> None:
    result = explain(kwargs.pop("pred"), kwargs.pop("gold", GOLD), **kwargs)
    assert result.ok is (reason == "match"), why
    assert reason in result.reason, (why, result.reason)


@pytest.mark.parametrize("shift", [0.0, 4e-7, 3e-6])
def test_pred_row_order_never_matters(shift: float) -> None:
    """Values crowded closer than the tolerance (sorted pairing fails, blocks are matched properly): the
    verdict is the same for every order of the prediction's rows, and flips once values leave the tolerance."""
    rng = random.Random(11)
    gold = [[i % 3, 1 + k * 5e-7, rng.choice((5.0, 7.0))] for i in range(40) for k in range(3)]
    pred = [[a, b + rng.choice((-shift, shift)) * b, c] for a, b, c in gold]
    verdicts = set()
    for _ in range(20):
        rng.shuffle(pred)
        verdicts.add(match(pred, gold))
    assert verdicts == {shift < 1e-6}


def test_empty_gold_matches_only_success_empty() -> None:
    assert match([], []) is True
    assert match(None, []) is False
    assert match([[0]], []) is False
    assert match([], [], truncated=True) is False


def test_identical_columns_do_not_branch() -> None:
    """12 columns with identical copies: any choice among copies is equivalent, so no search explodes."""
    rng = random.Random(3)
    base = [[i, i % 7, f"p{i % 13}", rng.random()] for i in range(300)]
    gold = [[a, b, c, d, a, a, b, b, d, d, c, a] for a, b, c, d in base]
    perm = list(range(12))
    rng.shuffle(perm)
    pred = [[r[i] for i in perm] for r in gold]
    rng.shuffle(pred)
    assert match(pred, gold)
    pred[0][perm.index(0)] = -1  # one id wrong in one copy
    assert not match(pred, gold)


def test_columns_with_equal_bags_are_told_apart_by_rows() -> None:
    """Two columns holding the same values in different rows: the assignment must pick by rows."""
    gold = [[1, 3, "a"], [2, 1, "b"], [3, 2, "c"]]
    assert match([[r[2], r[1], r[0]] for r in gold], gold)
    assert not match([[1, 2, "a"], [2, 3, "b"], [3, 1, "c"]], gold)


def test_order_keys_by_position_and_unknown_expressions() -> None:
    assert order_key_columns("select ksdm, count(*) as n from t group by 1 order by n desc", ["ksdm", "n"]) == [1]
    assert order_key_columns("select a, b from t order by 2, 1", ["a", "b"]) == [1, 0]
    assert order_key_columns("select a from t order by random()", ["a"]) is None
    assert order_key_columns("select a from t", ["a"]) is None


def test_version_is_exported() -> None:
    assert COMPARATOR_VERSION == 12


@pytest.mark.parametrize(
    ("pred", "gold", "rates", "expected", "why"),
    [
        ([[1e-13]], [[0]], (), True, "summation noise where the gold is an integer 0"),
        ([[41.99999999999999]], [[42]], (), True, "summation noise beside a whole number"),
        ([[1e-6]], [[0]], (), False, "a millionth is not noise"),
        ([[2.9999999]], [[3]], (), False, "a near miss of an integer stays a miss"),
        ([["a", 12.3], ["b", 4.6]], [["a", 0.12345], ["b", 0.04567]], [1], True, "a rate as a percentage, rounded"),
        ([["a", 0.123], ["b", 0.046]], [["a", 12.345], ["b", 4.567]], [1], True, "a percentage rate as a fraction"),
        ([["a", 50], ["b", 25]], [["a", 0.5], ["b", 0.25]], [1], True, "whole percentages of a fraction"),
        ([["a", 12.3], ["b", 4.6]], [["a", 0.12345], ["b", 0.04567]], (), False, "100x is no match where no rate"),
        ([["a", 12.4], ["b", 4.6]], [["a", 0.12345], ["b", 0.04567]], [1], False, "a wrong percentage"),
        ([["a", 1.23], ["b", 0.46]], [["a", 0.12345], ["b", 0.04567]], [1], False, "10x is neither form"),
    ],
)
def test_noise_floor_and_rates(pred: Rows, gold: list[list[Any]], rates: list[int], expected: bool, why: str) -> None:
    assert match(pred, gold, rates=rates) is expected, why


BREAKDOWN = [["0101", "Cardiology", 30, 0.25], ["0102", "Endocrinology", 10, 0.5], ["0103", "Respiratory", 20, 0.1]]


@pytest.mark.parametrize(
    ("pred", "kept", "why"),
    [
        ([[None, None, 60, 0.2], *BREAKDOWN], BREAKDOWN, "a grand total on top (grouping sets): NULL labels"),
        ([*BREAKDOWN, ["全院", "合计", 60, 0.2]], BREAKDOWN, "a total row labelled in Chinese"),
        ([*BREAKDOWN, ["Total", None, 60, 0.3]], BREAKDOWN, "an overall rate within the rows' range"),
        ([*BREAKDOWN, [None, None, 61, 0.2]], None, "a total whose count is not the sum"),
        ([*BREAKDOWN, [None, None, 60, 0.9]], None, "an overall rate outside every row's"),
        ([*BREAKDOWN, [None, None, 30, 0.25]], None, "a copy of one row under a NULL label sums nothing"),
        ([*BREAKDOWN, [None, "Unknown", 5, 0.3]], None, "a NULL department of its own is an ordinary row"),
        (BREAKDOWN, None, "no summary row"),
        (
            [[*r, "department"] for r in BREAKDOWN] + [["TOTAL", "合计", 60, 0.2, "the three above"]],
            [[*r, "department"] for r in BREAKDOWN],
            "a total with a description no other row holds: it names no group",
        ),
        (
            [[*r, "department"] for r in BREAKDOWN] + [["TOTAL", "合计", 61, 0.2, "the three above"]],
            None,
            "a described total whose count is not the sum is an extra row",
        ),
        (
            [["2024-01", "a", 2], ["2024-01", "b", 3], ["2024-01", None, 5], ["2024-02", "a", 1], ["2024-02", None, 1]],
            [["2024-01", "a", 2], ["2024-01", "b", 3], ["2024-02", "a", 1]],
            "subtotals per month: each sums its own month",
        ),
    ],
)
def test_summary_rows(pred: list[list[Any]], kept: list[list[Any]] | None, why: str) -> None:
    assert without_summary_rows(pred) == kept, why


# distinct patients per department (the gold cannot check their total: a patient seen in two departments
# counts once) beside visits (a count that adds up), and a mean length of stay
DISTINCT = [["Cardiology", 30, 40, 8.5], ["Endocrinology", 10, 12, 6.0], ["Respiratory", 20, 25, 9.1]]
DISTINCT_SQL = (
    "select d.ksmc, count(distinct v.patient_id) as patients, count(*) as visits, round(avg(v.zyts), 1) as alos "
    "from emr.t_zy_visit v join emr.dict_dept d on d.ksdm = v.ksdm group by d.ksmc"
)


@pytest.mark.parametrize(
    ("pred", "kept", "why"),
    [
        ([*DISTINCT, ["合计", 55, 77, 8.2]], DISTINCT, "a distinct-patient total, not the sum: unchecked"),
        ([*DISTINCT, ["全院", 55, 77, 12.0]], DISTINCT, "a hospital-wide mean outside the rows' range, labelled so"),
        ([*DISTINCT, ["Total", 60, 77, 8.2]], DISTINCT, "and the sum of the rows, as before"),
        ([*DISTINCT, ["Hospital-wide", 55, 78, 8.2]], None, "visits add up: a wrong total of them is an extra row"),
        ([*DISTINCT, [None, 55, 77, 8.2]], None, "a NULL label says no summary: only a true sum is set aside"),
        ([*DISTINCT, ["Pediatrics", 55, 77, 8.2]], None, "a group's label is no summary"),
        (
            [["2024-01", *r] for r in DISTINCT] + [["2024-01", "合计", 55, 77, 8.2]],
            [["2024-01", *r] for r in DISTINCT],
            "a subtotal labelled in words beside the month it covers",
        ),
    ],
)
def test_summary_rows_the_gold_cannot_check(pred: list[list[Any]], kept: list[list[Any]] | None, why: str) -> None:
    checked = [[r[j] for r in DISTINCT] for j in additive_columns(DISTINCT_SQL, ["ksmc", "patients", "visits", "alos"])]
    shift = len(pred[0]) - len(DISTINCT[0])
    free = {j + shift for j in unchecked_columns([r[shift:] for r in pred], checked)} | set(range(shift))
    assert without_summary_rows(pred, free=free) == kept, why


@pytest.mark.parametrize(
    ("sql", "width", "additive", "why"),
    [
        (DISTINCT_SQL, 4, [2], "count(*) adds up; a distinct count and a mean do not"),
        ("select ksdm, sum(fee) as fee, count(x) filter (where y) as n from t group by 1", 3, [1, 2], "sums, counts"),
        ("with c as (select ksdm, count(*) as n from t group by 1) select c.ksdm, c.n from c", 2, [1], "via a CTE"),
        ("select ksdm, count(*) * 100.0 / sum(count(*)) over () as share from t group by 1", 2, [], "a share"),
        ("select a from t union select b from u", 1, [], "not read: nothing is checked by a sum"),
    ],
)
def test_additive_columns(sql: str, width: int, additive: list[int], why: str) -> None:
    assert additive_columns(sql, [f"c{j}" for j in range(width)]) == additive, why


@pytest.mark.parametrize(
    ("pred", "gold", "decimals", "rel_tol", "expected", "why"),
    [
        ([[8.58]], [[8.6]], [1], 1e-6, True, "the gold rounded to one decimal; the finer value rounds to it"),
        ([[8.58]], [[8.6]], [None], 1e-6, False, "a gold that does not say it rounded is not read coarser"),
        ([[8.66]], [[8.6]], [1], 1e-6, False, "a finer value that rounds to another value"),
        ([[8.66]], [[8.6]], [1], 0.01, True, "which the task's tolerance may still accept"),
        ([[8.73]], [[8.6]], [1], 0.01, False, "but not beyond it"),
        ([[0.714]], [[0.71]], [2], 1e-6, True, "two decimals"),
        ([[0.7]], [[0.71]], [2], 1e-6, False, "a coarser value is not finer"),
        ([[8.58], [None]], [[None], [8.6]], [1], 1e-6, True, "NULLs stay where they are"),
        ([[8.58], [8.61]], [[8.6], [8.6]], [1], 1e-6, True, "two values rounding to one gold value"),
        ([[8.58], [8.66]], [[8.6], [8.7]], [1], 1e-6, True, "each to its own"),
        ([[8.58], [8.56]], [[8.6], [8.7]], [1], 1e-6, False, "a gold value no prediction rounds to"),
    ],
)
def test_a_gold_that_rounds_is_met_by_a_finer_prediction(
    pred: Rows, gold: list[list[Any]], decimals: list[int | None], rel_tol: float, expected: bool, why: str
) -> None:
    assert match(pred, gold, rel_tol=rel_tol, gold_stated=decimals) is expected, why


def _fake_run(rows: list[list[Any]]) -> Callable[[str], list[list[Any]]]:
    return lambda sql: rows


TIED = [["a", 5, 1], ["b", 4, 2], ["c", 4, 3], ["d", 4, 4], ["e", 1, 5]]  # (name, score, id)


@pytest.mark.parametrize(
    ("sql", "keys", "hidden", "limit"),
    [
        ("select ksdm, n - m as change from t order by abs(n - m) desc", [2], 1, None),
        ("select ksdm, n as change from t order by change desc, ksdm limit 3", [1, 0], 0, 3),
        ("select ksdm, n as change from t order by 2", [1], 0, None),
        # t.ksdm is the column the output ksdm selects: no hidden copy of it
        ("select ksdm, n from t order by case when n > 3 then 0 else 1 end, t.ksdm", [2, 0], 1, None),
        ("select ksdm, change from t order by ksdm fetch first 5 rows only", [0], 0, 5),
    ],
)
def test_gold_rewrite_names_every_order_key(sql: str, keys: list[int], hidden: int, limit: int | None) -> None:
    rewrite = ties.keyed(sql, ["ksdm", "change"])
    assert rewrite is not None and (rewrite.keys, rewrite.hidden, rewrite.limit) == (keys, hidden, limit), sql
    assert "evalpkg_order_key" in rewrite.sql if hidden else rewrite.sql.lower().startswith("select ksdm")
    if limit is not None:
        assert rewrite.with_ties(1).endswith(f"FETCH FIRST {limit} ROWS WITH TIES")


@pytest.mark.parametrize(
    ("names", "values", "significant", "why"),
    [
        (["n", "ksdm"], [[5, "0101"], [5, "0102"]], 1, "a code after a count only breaks ties"),
        (["abs(change)", "d.ksmc"], [[1, "a"], [1, "b"]], 1, "a name after an expression only breaks ties"),
        (["n", "patient_id"], [[5, 17], [5, 18]], 1, "an id breaks ties, whatever its type"),
        (["year", "month"], [[2024, 1], [2024, 2]], 2, "a period is asked for"),
        (["n", "month"], [[5, "2024-01"], [5, "2024-02"]], 2, "a month label is a period"),
        (["ksmc"], [["a"], ["b"]], 1, "the only key is asked for"),
        (["n", "avg_los"], [[5, 1.5], [5, 2.5]], 2, "a second measure is asked for"),
    ],
)
def test_tie_breaking_keys(names: list[str], values: list[list[Any]], significant: int, why: str) -> None:
    assert ties.significant_keys(names, values) == significant, why


@pytest.mark.parametrize(
    "sql", ["select a from t union select b from u order by 1", "select * from t order by a", "select a from t"]
)
def test_gold_rewrite_declines_what_it_cannot_read(sql: str) -> None:
    assert ties.keyed(sql, ["a"]) is None


@pytest.mark.parametrize(
    ("pred", "expected", "why"),
    [
        ([["a", 5], ["c", 4]], True, "the LIMIT cut a tie: another tied row is as right"),
        ([["a", 5], ["d", 4]], True, "any tied row"),
        ([["a", 5], ["b", 4]], True, "the gold's own choice"),
        ([["c", 4], ["a", 5]], False, "ties do not excuse the order of rows that are not tied"),
        ([["a", 5], ["e", 1]], False, "a row outside the tie is not acceptable"),
        ([["b", 4], ["c", 4]], False, "the LIMIT dropped a row that was not tied"),
        ([["a", 5], ["b", 4], ["c", 4], ["d", 4]], True, "every tied row kept, as FETCH ... WITH TIES keeps them"),
        ([["a", 5], ["b", 4], ["c", 4]], False, "two of the three tied rows: neither the N asked nor every tie"),
        ([["a", 5], ["b", 4], ["c", 4], ["d", 4], ["e", 1]], False, "a row past the tie"),
    ],
)
def test_a_limit_that_cuts_a_tie_accepts_any_tied_row(pred: Rows, expected: bool, why: str) -> None:
    gold = [["a", 5], ["b", 4]]
    rewrite = ties.keyed("select name, score from t order by score desc limit 2", ["name", "score"])
    assert rewrite is not None
    full = [r[:2] for r in TIED[:4]]  # FETCH FIRST 2 ROWS WITH TIES: b, c and d tie at 4
    golds = ties.acceptable(gold, 2, rewrite, _fake_run(full))
    assert golds is not None and len(golds) == 4  # three choices of one tied row, and all three
    assert any(match(pred, g.rows, order_matters=True, groups=g.groups) for g in golds) is expected, why


@pytest.mark.parametrize(
    ("pred", "keys", "expected", "why"),
    [
        ([["a", 5], ["d", 4], ["c", 4], ["b", 4], ["e", 1]], [1], True, "ties on an expression key in any order"),
        ([["a", 5], ["d", 4], ["c", 4], ["b", 4], ["e", 1]], [2], False, "the gold orders by a unique key"),
        ([["d", 4], ["a", 5], ["c", 4], ["b", 4], ["e", 1]], [1], False, "a tie group moved"),
    ],
)
def test_tie_groups_from_hidden_keys(pred: Rows, keys: list[int], expected: bool, why: str) -> None:
    gold = [r[:2] for r in TIED]
    groups = tie_groups([tuple(r[k] for k in keys) for r in TIED])
    assert match(pred, gold, order_matters=True, groups=groups) is expected, why
