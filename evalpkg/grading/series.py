"""A comparison of two periods answered as its period series. A gold that compares the previous and
the current period in one wide row per key (pairs of columns whose names speak of each period and are otherwise
the same: prev_avg_los, cur_avg_los) states the same facts as two rows per key, the earlier period's numbers
and the later one's, each beside the comparison's own label (the later period: quarter_start). A prediction
whose label column holds two consecutive periods, a month or a quarter however written, is read that way: each
row marked as the earlier or the later period, the later period beside it, its labels read through the label
normaliser as the gold's (relabel.py). Where the two periods are runs of whole years ('2018-2020',
'2021-2023': a gold comparing prev_admissions and this_admissions over years its SQL bounds), the rows are
labelled by the years each covers, the earlier run the previous period. Its other columns are extra columns
as in any layout (a role that only renames the period, 'drop quarter'); the measures are found by assignment,
as everywhere, while the period label alone decides which row is which period."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from evalpkg.grading.cross import period_index
from evalpkg.grading.labels import Labels, label_key, label_text, relative_words
from evalpkg.grading.periods import one_year, year_range
from evalpkg.grading.relabel import relabelled

Rows = Sequence[Sequence[Any]]
SeriesLayout = tuple[list[list[Any]], list[list[Any]], dict[int, int], list[int]]  # pred, gold, pinned, sources
_PERIODS = ("prev", "this")
_NO_SOURCE = -1  # the earlier/later mark is no gold column


def period_series(
    pred_rows: Rows, pred_columns: Sequence[str], gold_rows: Rows, gold_columns: Sequence[str], labels: Labels
) -> Iterator[SeriesLayout]:
    """(prediction rows, gold rows, pinned, sources) per prediction label column of two consecutive periods,
    both sides as period rows: [earlier or later, ...]; nothing where the gold compares no two periods."""
    pairs = _pairs(gold_columns)
    if not pairs or not pred_rows or len(pred_columns) != len(pred_rows[0]):
        return
    paired = {j for pair in pairs for j in pair}
    keys = [j for j in range(len(gold_columns)) if j not in paired]
    gold = [
        [mark, *(r[j] for j in keys), *(r[pair[i]] for pair in pairs)]
        for r in gold_rows
        for i, mark in enumerate(_PERIODS)
    ]
    gold_names = ["", *(gold_columns[j] for j in keys), *(gold_columns[prev] for prev, _ in pairs)]
    sources = [_NO_SOURCE, *keys, *(prev for prev, _ in pairs)]
    for label_col in range(len(pred_columns)):
        marks = _marks([r[label_col] for r in pred_rows])
        if marks is None:
            continue
        later = next(text for text, mark in marks.items() if mark == "this")
        rows = [
            [marks[label_text(r[label_col]) or ""], later, *(v for k, v in enumerate(r) if k != label_col)]
            for r in pred_rows
        ]
        names = ["", pred_columns[label_col], *(c for k, c in enumerate(pred_columns) if k != label_col)]
        rows = relabelled(rows, names, gold, gold_names, labels) or rows
        yield rows, gold, {0: 0}, sources


def _pairs(columns: Sequence[str]) -> list[tuple[int, int]]:
    """(previous, current) column pairs: names that speak of one period each and are otherwise the same."""
    rest: dict[str, dict[str, int]] = {}
    for j, column in enumerate(columns):
        words = label_key(column).split(" ")
        spoken = [mark for mark in _PERIODS if any(w in relative_words()[mark] for w in words)]
        if len(spoken) == 1:
            other = " ".join(w for w in words if not any(w in group for group in relative_words().values()))
            rest.setdefault(other, {}).setdefault(spoken[0], j)
    return [(pair["prev"], pair["this"]) for other, pair in rest.items() if other and len(pair) == 2]


def _marks(column: Sequence[Any]) -> dict[str, str] | None:
    """Label -> 'prev' or 'this' where the column holds exactly two labels, consecutive periods: months or
    quarters, or runs of whole years ('2018-2020', '2021-2023') the second of which starts the year after the
    first ends."""
    texts = list(dict.fromkeys(t for v in column if (t := label_text(v)) is not None))
    if len(texts) != 2 or len(column) < 2 or any(v is None for v in column):
        return None
    ranges = {t: r for t in texts if (r := year_range(label_key(t))) is not None}
    if len(ranges) == 2:
        earlier, later = sorted(ranges, key=ranges.__getitem__)
        return {earlier: "prev", later: "this"} if ranges[later][0] == ranges[earlier][1] + 1 else None
    year = one_year(map(label_key, texts))
    first, second = (period_index(t, year) for t in texts)
    if first is None or second is None or abs(first - second) != 1:
        return None
    earlier, later = texts if first < second else texts[::-1]
    return {earlier: "prev", later: "this"}
