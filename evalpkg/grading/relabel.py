"""Labels as facts: a prediction's row labels read through the one label normaliser (labels.py) as the
gold's own labels. A label names the gold label it means or holds: the entry's code or its name in the other
language ('0101', 'Cardiology' for 心血管内科), the name decorated with the other one ('Cardiology (心血管内科)', '全院
Hospital-wide'), a total for the gold's one total row ('(Hospital-wide)' for 全院), a period however written,
and a quarter labelled by its first month in a column named for quarters ('2025-07' as quarter_start is
2025-Q3); whole numbers are labels in a column named for a period (a year). Each prediction label must name
exactly one gold label and no two the same one; a row whose label names none of the gold's and whose numbers
are all 0 or NULL is a group the question covers with nothing in it (an active department with no admission,
a year of the range asked with no stay), a neutral row left out, except where the gold has a LIMIT (a top N
keeps its N); a row with no number states its label, so an extra name in a list of names is an extra row.
The values are still compared: the labels only say which row is which."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

from evalpkg.grading.labels import Labels, label_key, label_text
from evalpkg.grading.periods import one_year
from evalpkg.grading.summary import is_total_label
from evalpkg.sql.vocabulary import CALENDAR_NAME, QUARTER_START

Rows = Sequence[Sequence[Any]]
MAX_DISTINCT = 200  # a column of more distinct labels is an identifier, not a grouping
_UNNAMED = object()


def relabelled(
    pred_rows: Rows,
    pred_columns: Sequence[str],
    gold_rows: Rows,
    gold_columns: Sequence[str],
    labels: Labels,
    *,
    limited: bool = False,
) -> list[list[Any]] | None:
    """The prediction with each label column written in the gold's labels and its neutral rows left out
    (kept where the gold has a LIMIT: a top N keeps its N); None where no column reads so, or nothing
    changes."""
    if not pred_rows or not gold_rows:
        return None
    rows = [[_quarter_named(v, _name(pred_columns, k)) for k, v in enumerate(r)] for r in pred_rows]
    gold_keys = [j for j in range(len(gold_columns)) if _is_label_column([r[j] for r in gold_rows], gold_columns[j])]
    pred_keys = [k for k in range(len(rows[0])) if _is_label_column([r[k] for r in rows], _name(pred_columns, k))]
    unnamed: set[int] = set()  # rows whose label names no gold label
    used: set[int] = set()
    for j in gold_keys:
        gold_labels = {t: r[j] for r in gold_rows if (t := label_text(r[j])) is not None}
        names = [[g, *_other_names(g, gold_columns[j])] for g in gold_labels]
        for k in pred_keys:
            if k in used:
                continue
            mapping = _mapping([r[k] for r in rows], list(gold_labels), names, labels)
            if mapping is not None:
                used.add(k)
                for i, r in enumerate(rows):
                    text = label_text(r[k])
                    if text is None:
                        continue  # NULL: a total row, or a group of its own, compared as it is
                    if (found := mapping[text]) is _UNNAMED:
                        unnamed.add(i)
                    else:
                        r[k] = gold_labels[found]
                break
    if not used or (unnamed and limited) or any(not _neutral(rows[i], used) for i in unnamed):
        return None  # an extra row that states something: a scope the gold does not have
    kept = [r for i, r in enumerate(rows) if i not in unnamed]
    return kept if kept != [list(r) for r in pred_rows] else None


def _name(columns: Sequence[str], k: int) -> str:
    return columns[k] if k < len(columns) else ""


def _is_label_column(values: list[Any], name: str) -> bool:
    """Text labels, or whole numbers in a column named for a period (the year 2020)."""
    present = [v for v in values if v is not None]
    if not present or len(set(map(str, present))) > MAX_DISTINCT:
        return False
    if all(isinstance(v, str) for v in present):
        return True
    return bool(CALENDAR_NAME.search(name)) and all(type(v) is int for v in present)


def _other_names(label: str, column: str) -> list[str]:
    """In a column named for quarters, a quarter written as its first month also names the quarter, and a
    quarter's number (1-4, the question's year) is that quarter."""
    if "quarter" not in column.lower():
        return []
    if m := QUARTER_START.fullmatch(label):
        return [f"{m[1]}-Q{(int(m[2]) + 2) // 3}"]
    return [f"Q{label}"] if label in ("1", "2", "3", "4") else []


def _quarter_named(value: Any, column: str) -> Any:
    """A prediction's quarter written as its first day ('2025-07-01' in quarter_start) as the quarter."""
    if "quarter" in column.lower() and isinstance(value, str) and (m := QUARTER_START.fullmatch(value[:7])):
        return f"{m[1]}-Q{(int(m[2]) + 2) // 3}" if value[7:] in ("", "-01") else value
    return value


def _mapping(
    values: list[Any], gold_labels: list[str], names: list[list[str]], labels: Labels
) -> dict[str | None, Any] | None:
    """Prediction label -> the gold label it names (or _UNNAMED); None where a label names several, two
    name one, or none names any."""
    texts = list(dict.fromkeys(t for v in values if (t := label_text(v)) is not None))
    year = one_year(map(label_key, chain(texts, gold_labels)))
    targets = labels.targets(names, year)
    totals = {i for i, g in enumerate(gold_labels) if is_total_label(g)}
    mapping: dict[str | None, Any] = {}
    for text in texts:
        found = targets.named(text)
        if not found and len(totals) == 1 and is_total_label(text):
            found = set(totals)  # '(Hospital-wide)' for 全院: a total names the gold's one total
        if len(found) > 1:
            return None
        mapping[text] = gold_labels[found.pop()] if found else _UNNAMED
    named = [g for g in mapping.values() if g is not _UNNAMED]
    if not named or len(set(named)) != len(named):
        return None
    return mapping


def _neutral(row: list[Any], label_columns: set[int]) -> bool:
    """A group with nothing in it: it has numbers, each 0 or NULL. A row of labels only states its labels (a
    department in a list of names), so it is never neutral."""
    numbers = [v for k, v in enumerate(row) if k not in label_columns and not isinstance(v, str)]
    return bool(numbers) and all(v is None or (not isinstance(v, bool) and v == 0) for v in numbers)
