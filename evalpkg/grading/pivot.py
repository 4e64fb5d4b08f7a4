"""Long vs wide: a prediction that is the long form of a wide gold, or the wide form of a long one,
is the same answer where its labels name the gold's outputs. `relayouts` pivots one side so that both have
the gold's wide layout, and says which prediction column each pivoted output must be (`pinned`): the label
decides that, not the values, so values under the wrong label fail. No label, no relayout: an unlabelled
long form does not match. A row label and a column header that together name a gold column (MZ x
prev_month_visits = mz_prev) are the cross pivot of cross.py. Pure (no database): the labels' aliases come
in a `Labels`.

A pivot reads a missing (key, label) row as NULL, and a NULL cell as a missing row: a long form that leaves
out a zero row still differs from a wide gold that writes 0."""

from __future__ import annotations

import decimal
from collections.abc import Iterator, Sequence
from itertools import chain, islice
from typing import Any, NamedTuple

from evalpkg.grading.cross import crossed
from evalpkg.grading.labels import Labels, Targets, label_key, label_text
from evalpkg.grading.periods import one_year
from evalpkg.grading.series import period_series

MIN_LABELS, MAX_LABELS = 2, 40  # a label column names at least two outputs; more labels is no label column
MAX_CROSSED = 4  # cross pivots, one per label column, tried after the others
MAX_RELAYOUTS = 12 + MAX_CROSSED
Rows = Sequence[Sequence[Any]]
_MISSING = object()


class Relayout(NamedTuple):
    pred: Rows
    gold: Rows
    pinned: dict[int, int]  # gold column -> the prediction column its label says carries it
    sources: list[int]  # gold column -> the column of the gold as given that it comes from (for `rates`)


def relayouts(
    pred_rows: Rows,
    pred_columns: Sequence[str],
    gold_rows: Rows,
    gold_columns: Sequence[str],
    gold_names: Sequence[Sequence[str]],
    labels: Labels,
) -> Iterator[Relayout]:
    """Candidate (prediction rows, gold rows, pinned, sources) in one layout, at most MAX_RELAYOUTS, for
    comparator.match(pred, gold, pinned=pinned, order_matters=False, ...); the first that matches decides.
    gold_names[j]: what gold column j is known by besides its name (the output's name, its zh and en
    meaning; may be empty). First the prediction as the long form of a wide gold, then the gold as the
    long form of a wide prediction, then both as period rows where the gold compares two periods (series.py),
    then the prediction as a cross of labels and headers (cross.py)."""
    if not pred_rows or not gold_rows or len(pred_rows[0]) < MIN_LABELS:
        return
    names = [[column, *(gold_names[j] if j < len(gold_names) else ())] for j, column in enumerate(gold_columns)]
    candidates = chain(
        _widened_predictions(pred_rows, gold_rows, names, labels),
        _widened_golds(pred_rows, pred_columns, gold_rows, labels),
    )
    yield from islice(candidates, MAX_RELAYOUTS - MAX_CROSSED)
    for series in period_series(pred_rows, pred_columns, gold_rows, gold_columns, labels):
        yield Relayout(*series)
    yield from islice(_crossed_predictions(pred_rows, pred_columns, gold_rows, names, labels), MAX_CROSSED)


def _widened_predictions(
    pred_rows: Rows, gold_rows: Rows, names: list[list[str]], labels: Labels
) -> Iterator[Relayout]:
    """The prediction pivoted to the gold's wide layout: a label column whose values name gold columns, a
    numeric value column, and the other prediction columns as the key of a row. Labels that name no gold
    column are left out, as extra columns are."""
    if len(names) < MIN_LABELS:
        return
    columns = list(zip(*pred_rows, strict=True))
    every_name = [n for group in names for n in group]
    for label_col, column in enumerate(columns):
        texts = _distinct_labels(column, nulls=True)
        if texts is None:
            continue
        year = one_year(map(label_key, chain(texts, every_name)))
        gold_of = _naming(texts, labels.targets(names, year), complete=False)
        if gold_of is None:
            continue
        outputs = sorted(set(gold_of.values()))
        slot_of = {text: outputs.index(j) for text, j in gold_of.items()}
        for value_col in _numeric_columns(columns):
            for keys in _key_choices(columns, label_col, value_col):
                if len(keys) + len(outputs) < len(names):
                    continue  # too few columns left for the gold's others
                rows = _widened(pred_rows, label_col, value_col, keys, slot_of)
                if rows is not None:
                    pinned = {j: len(keys) + slot for slot, j in enumerate(outputs)}
                    yield Relayout(rows, gold_rows, pinned, list(range(len(names))))


def _crossed_predictions(
    pred_rows: Rows, pred_columns: Sequence[str], gold_rows: Rows, names: list[list[str]], labels: Labels
) -> Iterator[Relayout]:
    """The prediction pivoted to the gold's wide layout where a row label and a column header together name
    each gold column: a label column, its numeric columns as the headers, the other columns as the key."""
    if len(names) < MIN_LABELS or len(pred_columns) != len(pred_rows[0]):
        return
    columns = list(zip(*pred_rows, strict=True))
    numeric = _numeric_columns(columns)
    for label_col, column in enumerate(columns):
        texts = _distinct_labels(column, nulls=True)
        values = [i for i in numeric if i != label_col]
        if texts is None or not values:
            continue
        keys = [i for i in range(len(columns)) if i != label_col and i not in numeric]
        found = crossed(pred_rows, label_col, texts, values, keys, pred_columns, names, labels)
        if found is not None:
            yield Relayout(found[0], gold_rows, found[1], list(range(len(names))))


def _widened_golds(pred_rows: Rows, pred_columns: Sequence[str], gold_rows: Rows, labels: Labels) -> Iterator[Relayout]:
    """The gold pivoted to the prediction's wide layout: a gold label column whose every value names a
    prediction column (by its header), a numeric gold value column, the other gold columns as the key."""
    if len(gold_rows) < MIN_LABELS or len(pred_columns) < MIN_LABELS:
        return
    columns = list(zip(*gold_rows, strict=True))
    headers = [[header] for header in pred_columns]
    for label_col, column in enumerate(columns):
        texts = _distinct_labels(column, nulls=False)
        if texts is None:
            continue
        year = one_year(map(label_key, chain(texts, pred_columns)))
        pred_of = _naming(texts, labels.targets(headers, year), complete=True)
        if pred_of is None:
            continue
        slot_of = {text: slot for slot, text in enumerate(texts)}
        for value_col in _numeric_columns(columns):
            if value_col == label_col:
                continue
            keys = [i for i in range(len(columns)) if i not in (label_col, value_col)]
            rows = _widened(gold_rows, label_col, value_col, keys, slot_of)
            if rows is not None:
                pinned = {len(keys) + slot_of[text]: p for text, p in pred_of.items()}
                yield Relayout(pred_rows, rows, pinned, [*keys, *[value_col] * len(texts)])


def _naming(texts: list[str], targets: Targets, *, complete: bool) -> dict[str, int] | None:
    """Label -> the one target it names; None where a label names two (ambiguous), two labels name one,
    fewer than two are named, or (complete) a label names nothing."""
    naming: dict[str, int] = {}
    for text in texts:
        named = targets.named(text)
        if len(named) > 1 or (complete and not named):
            return None
        if named:
            naming[text] = named.pop()
    if len(naming) < MIN_LABELS or len(set(naming.values())) < len(naming):
        return None
    return naming


def _distinct_labels(column: Sequence[Any], *, nulls: bool) -> list[str] | None:
    """The column's distinct labels in order of appearance; None where it is no label column (a value that
    is no label, such as a fractional number; too few or too many labels; a NULL unless `nulls`)."""
    seen: dict[str, None] = {}
    for value in column:
        text = label_text(value)
        if text is None:
            if value is None and nulls:
                continue
            return None
        if text not in seen:
            seen[text] = None
            if len(seen) > MAX_LABELS:
                return None
    return list(seen) if len(seen) >= MIN_LABELS else None


_NUMBER_TYPES = {int, float, decimal.Decimal}


def _numeric(column: Sequence[Any]) -> bool:
    """Numbers, and maybe NULLs (booleans are no numbers)."""
    types = set(map(type, column)) - {type(None)}
    return bool(types) and types <= _NUMBER_TYPES


def _numeric_columns(columns: list[tuple[Any, ...]]) -> list[int]:
    return [i for i, column in enumerate(columns) if _numeric(column)]


def _key_choices(columns: list[tuple[Any, ...]], label_col: int, value_col: int) -> list[list[int]]:
    """The columns that key a wide row: every other one; where some hold fractions (a share beside the
    count, per cell rather than per key), those without them; and the text columns alone (the other numbers
    per cell: the number of results beside each mean, where only the means are asked)."""
    if value_col == label_col:
        return []
    others = [i for i in range(len(columns)) if i not in (label_col, value_col)]
    whole = [
        i
        for i in others
        if not any(isinstance(v, float | decimal.Decimal) and label_text(v) is None for v in columns[i])
    ]
    texts = [i for i in others if all(v is None or isinstance(v, str) for v in columns[i])]
    choices: list[list[int]] = []
    for keys in (others, whole, texts):
        if keys not in choices:
            choices.append(keys)
    return choices


def _widened(
    rows: Rows, label_col: int, value_col: int, keys: list[int], slot_of: dict[str, int]
) -> list[list[Any]] | None:
    """One row per key: the key's values, then per slot the value under the label of that slot (NULL where
    the long form has no such row). None where a key has two rows under one label: no pivot."""
    width = max(slot_of.values()) + 1
    slot_by_value: dict[Any, int | None] = {}  # label_text once per distinct value, not once per row
    lines: dict[tuple[Any, ...], list[Any]] = {}
    try:
        for row in rows:
            value = row[label_col]
            if value not in slot_by_value:
                text = label_text(value)
                slot_by_value[value] = slot_of.get(text) if text is not None else None
            slot = slot_by_value[value]
            if slot is None:
                continue
            line = lines.setdefault(tuple([row[k] for k in keys]), [_MISSING] * width)
            if line[slot] is not _MISSING:
                return None
            line[slot] = row[value_col]
    except TypeError:  # a JSON array or object in a key column
        return None
    return [[*key, *(None if cell is _MISSING else cell for cell in line)] for key, line in lines.items()]
