"""How a period label is read (evalpkg/grading/periods.py): every form, a case per form with its reason where
the form is not plain. The raw values and names are tests/sql/test_vocabulary.py's."""

from __future__ import annotations

import pytest

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
