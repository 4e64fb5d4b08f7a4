"""The comparator against a careful reference on the tricky cases of SPEC §9."""

from __future__ import annotations

import pytest

from evalpkg.pipeline.comparator import match, order_key_columns

GOLD = [[1, "a", 2.5], [1, "a", 2.5], [2, "b", None]]


@pytest.mark.parametrize(
    ("pred", "expected", "why"),
    [
        (GOLD, True, "identical"),
        ([GOLD[2], GOLD[0], GOLD[1]], True, "row order does not matter without ORDER BY"),
        ([[r[2], r[0], r[1]] for r in GOLD], True, "column order does not matter"),
        ([GOLD[0], GOLD[2]], False, "bags: a lost duplicate is an error"),
        ([GOLD[0], GOLD[0], GOLD[0], GOLD[2]], False, "bags: an extra duplicate is an error"),
        ([[1, "a", 2.5000000001], [1, "a", 2.4999999999], [2, "b", None]], True, "float noise within tolerance"),
        ([[1, "a", 2.51], [1, "a", 2.5], [2, "b", None]], False, "a real numeric difference"),
        ([[1.0, "a", 2.5], [1, "a", 2.5], [2.0, "b", None]], True, "int and float are the same number"),
        ([[1, "a", 2.5], [1, "a", 2.5], [2, "b", 0]], False, "NULL is not zero"),
        ([[1, "a", 2.5], [1, "a", 2.5], [2, "b", "None"]], False, "NULL is not the string None"),
        ([[1, "a"], [1, "a"], [2, "b"]], False, "a missing column"),
        ([], False, "success-empty is not a match for a non-empty gold"),
        (None, False, "failure is never a match"),
    ],
)
def test_bag_semantics(pred: list[list[object]] | None, expected: bool, why: str) -> None:
    assert match(pred, GOLD) is expected, why


def test_empty_gold_matches_only_success_empty() -> None:
    assert match([], []) is True
    assert match(None, []) is False
    assert match([[0]], []) is False


def test_order_matters_only_when_gold_orders_and_ties_may_swap() -> None:
    gold = [["x", 5], ["y", 5], ["z", 3]]
    keys = order_key_columns("select ksdm, count(*) as n from t group by 1 order by n desc", ["ksdm", "n"])
    assert keys == [1]
    assert match([["y", 5], ["x", 5], ["z", 3]], gold, order_matters=True, order_keys=keys)  # a tie
    assert not match([["z", 3], ["x", 5], ["y", 5]], gold, order_matters=True, order_keys=keys)
    assert match([["z", 3], ["x", 5], ["y", 5]], gold)  # same rows, order ignored
    assert not match([["y", 5], ["x", 5], ["z", 3]], gold, order_matters=True, order_keys=None)  # unknown keys: strict


def test_order_keys_by_position_and_unknown_expressions() -> None:
    assert order_key_columns("select a, b from t order by 2, 1", ["a", "b"]) == [1, 0]
    assert order_key_columns("select a from t order by random()", ["a"]) is None
    assert order_key_columns("select a from t", ["a"]) is None


def test_relative_tolerance_is_the_tasks() -> None:
    assert match([[100.4]], [[100.0]], rel_tol=0.01)
    assert not match([[100.4]], [[100.0]], rel_tol=0.001)
