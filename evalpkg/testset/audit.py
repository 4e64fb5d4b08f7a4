"""`testset audit-scorer`: the scorer checked against itself on every answerable task.

Each task's gold result is re-laid-out the ways a human grader accepts (layouts) and changed the ways a
grader rejects (mutations), and each goes through the scorer as if an agent had returned it. Every layout
must be accepted and every mutation rejected. A mutation that is another gold's answer, or a moved period
the data does not tell apart, is reported as such, not as a failure.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from evalpkg.errors import DataError, QueryError
from evalpkg.grading import ties
from evalpkg.grading.comparator import match
from evalpkg.grading.execution import GoldCache, gold_match, prediction_of, rate_columns
from evalpkg.grading.periods import MONTH_NAMES
from evalpkg.grading.summary import additive_columns, is_total_label, without_summary_rows
from evalpkg.progress import Progress, quiet
from evalpkg.sql.executor import jsonable
from evalpkg.sql.gold import GoldRunner
from evalpkg.sql.vocabulary import DAY, MONTH, TIME_KEY_NAME
from evalpkg.testset.models import Language, Task

Rows = list[list[Any]]
TOTAL_IN_WORDS = "(Hospital-wide)"


@dataclass(frozen=True)
class Gold:
    """One task's first gold as an agent would have returned it."""

    task: Task
    sql: str
    columns: list[str]
    rows: Rows
    groups: list[int] | None  # tie groups where order matters
    decimals: list[int | None] = field(default_factory=list)  # per column, the decimals its SQL rounded to


Layout = tuple[Rows, list[str]]
Transform = Callable[[Gold], Layout | None]  # None: does not apply to this task


def _numeric(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _columns_where(g: Gold, test: Callable[[list[Any]], bool]) -> list[int]:
    return [j for j in range(len(g.columns)) if g.rows and test([r[j] for r in g.rows])]


def _ints(g: Gold) -> list[int]:
    return _columns_where(g, lambda vs: all(type(v) is int for v in vs))


def _floats(g: Gold) -> list[int]:
    return _columns_where(g, lambda vs: all(type(v) is float for v in vs) and any(v != int(v) for v in vs))


# Layouts: a grader accepts each.


def extra_columns(g: Gold) -> Layout | None:
    return [["label", *r, i] for i, r in enumerate(g.rows)], ["label", *g.columns, "row_number"]


def permuted_columns(g: Gold) -> Layout | None:
    return ([r[::-1] for r in g.rows], g.columns[::-1]) if len(g.columns) > 1 else None


def renamed_columns(g: Gold) -> Layout | None:
    return g.rows, [f"answer_{j}" for j in range(len(g.columns))]


def shuffled_rows(g: Gold) -> Layout | None:
    if g.groups is not None or len(g.rows) < 2 or len({repr(r) for r in g.rows}) < 2:
        return None
    rows, rng = list(g.rows), random.Random(g.task.id)
    for _ in range(10):
        rng.shuffle(rows)
        if rows != g.rows:
            return rows, g.columns
    # Few rows, mostly alike: shuffles may keep giving the gold's order. Rows that are not all alike
    # always differ from themselves moved by one.
    return [*g.rows[1:], g.rows[0]], g.columns


def tie_reorder(g: Gold) -> Layout | None:
    """Rows tied on the ORDER BY keys, each tie in reverse."""
    if g.groups is None or max(Counter(g.groups).values(), default=0) < 2:
        return None
    by_group: dict[int, Rows] = {}
    for group, row in zip(g.groups, g.rows, strict=True):
        by_group.setdefault(group, []).append(row)
    rows = [r for group in by_group.values() for r in reversed(group)]
    return (rows, g.columns) if rows != g.rows else None


def integers_as_floats(g: Gold) -> Layout | None:
    ints = _ints(g)
    return ([[float(v) if j in ints else v for j, v in enumerate(r)] for r in g.rows], g.columns) if ints else None


def rounded_to_2_decimals(g: Gold) -> Layout | None:
    """Floats written to 2 decimals, where a grader takes that for the gold (its largest value keeps two
    significant figures and no value rounds to 0)."""
    cols = [j for j in _floats(g) if _roundable([r[j] for r in g.rows])]
    return ([[round(v, 2) if j in cols else v for j, v in enumerate(r)] for r in g.rows], g.columns) if cols else None


def _roundable(values: list[float]) -> bool:
    units = [abs(v) * 100 for v in values]
    return max(units) >= 10 and all(u == 0 or u >= 0.5 for u in units)


def rounded_to_1_by_query(g: Gold) -> Layout | None:
    """Fractions a query rounded to one decimal (round(x, 1): numerics written with one), where no value
    rounds to 0: 0.7 for 0.74 is the gold at the precision the answer states."""
    cols = [j for j in _floats(g) if all(v == 0 or abs(v) * 10 >= 0.5 for v in (r[j] for r in g.rows) if v is not None)]
    if not cols:
        return None
    return [[_written(v, 1) if j in cols and v is not None else v for j, v in enumerate(r)] for r in g.rows], g.columns


def _written(value: float, decimals: int) -> Decimal:
    """A value as a query hands it over after round(value, decimals): a numeric with that many decimals."""
    return Decimal(repr(value)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)


def rate_as_percentage(g: Gold) -> Layout | None:
    """A rate column given the other way: a fraction as a percentage, a percentage as a fraction."""
    rates = [j for j in rate_columns(g.task, g.columns) if j in _floats(g)]
    if not rates:
        return None
    scale = {j: 100.0 if max(abs(r[j]) for r in g.rows) <= 1 else 0.01 for j in rates}
    return [[v * scale[j] if j in scale else v for j, v in enumerate(r)] for r in g.rows], g.columns


def periods_spelt_out(g: Gold) -> Layout | None:
    """Period columns written another common way: quarter numbers as 'Q1', month numbers as 'Jan', month
    labels 'YYYY-MM' as 'Jan YYYY' (a grader reads each as the period the gold names)."""

    def spelt(j: int, v: Any) -> Any:
        name = g.columns[j].lower()  # a period column, not a count named for one (prev_month)
        if type(v) is int and name == "quarter" and 1 <= v <= 4:
            return f"Q{v}"
        if type(v) is int and name == "month" and 1 <= v <= 12:
            return MONTH_NAMES[v - 1][:3].title()
        if isinstance(v, str) and (m := MONTH.fullmatch(v)):
            return f"{MONTH_NAMES[int(m[2]) - 1][:3].title()} {m[1]}"
        return v

    rows = [[spelt(j, v) for j, v in enumerate(r)] for r in g.rows]
    return (rows, g.columns) if rows != g.rows else None


def total_row(g: Gold) -> Layout | None:
    """A breakdown with a total row on top: labels NULL, counts summed, means of fractional columns."""
    labels = _columns_where(g, lambda vs: all(isinstance(v, str) for v in vs))
    ints, floats = _ints(g), _floats(g)
    if len(g.rows) < 2 or not labels or not ints or without_summary_rows(g.rows) is not None:
        return None  # (a gold with its own total row asks for it)
    total = [
        sum(r[j] for r in g.rows) if j in ints else sum(r[j] for r in g.rows) / len(g.rows) if j in floats else None
        for j in range(len(g.columns))
    ]
    if any(v == 0 for v in total if v is not None):
        return None  # a total with a 0 in it (changes that cancel out) may read as a group with nothing in it
    return [total, *g.rows], g.columns


def described_total_row(g: Gold) -> Layout | None:
    """A total row labelled 合计 at the bottom, and a column saying what each row is, whose words on the total
    row no group holds ('sum of the rows above')."""
    if (layout := total_row(g)) is None:
        return None
    (total, *groups), columns = layout
    label = _columns_where(g, lambda vs: all(isinstance(v, str) for v in vs))[0]
    total = [("合计" if j == label else v) for j, v in enumerate(total)]
    return [[*r, "group"] for r in groups] + [[*total, "sum of the rows above"]], [*columns, "row_kind"]


SUMMARY_LABELS = ("合计", "全院", "Total", "Hospital-wide")


def _summary_row(g: Gold, *, wrong: bool) -> Layout | None:
    """A row labelled in summary words after the rows: counts that add up (the gold's additive columns) summed,
    one of them off beyond the tolerance where `wrong`; every other number one the gold cannot check (a distinct
    count: the largest row's; a rate or mean: half the smallest, outside the rows' range)."""
    labels = _label_columns(g)
    numbers = _ints(g) + _floats(g)
    additive = set(additive_columns(g.sql, g.columns)) & set(_ints(g))
    tol = g.task.result.numeric_tolerance
    unchecked = [j for j in numbers if j not in additive]
    if len(g.rows) < 2 or not labels or without_summary_rows(g.rows) is not None:
        return None
    if (wrong and not additive) or (not wrong and not unchecked):
        return None  # a wrong total the gold cannot check; a total the gold checks throughout (total_row)

    def cell(j: int) -> Any:
        values = [r[j] for r in g.rows]
        if j in additive:
            total = sum(values)
            return total + 1 + int(10 * tol * total) if wrong and j == min(additive) else total
        if j in unchecked:
            return max(values) if j in _ints(g) else min(values) / 2 if min(values) > 0 else max(values) + 1
        return SUMMARY_LABELS[random.Random(g.task.id).randrange(len(SUMMARY_LABELS))] if j == labels[0] else None

    total = [cell(j) for j in range(len(g.columns))]
    if any(v == 0 for v in total if _numeric(v)):
        return None  # a row of zeros may read as a group with nothing in it
    return [*g.rows, total], g.columns


def unchecked_total_row(g: Gold) -> Layout | None:
    """A breakdown with a row labelled 合计, 全院, 'Total' or 'Hospital-wide' whose distinct count, rate or mean
    the gold cannot check (a patient counted in two departments, a hospital-wide rate): the label says it is a
    summary, so a grader sets it aside whatever its value; counts that add up are summed."""
    return _summary_row(g, wrong=False)


def wide_row_with_total(g: Gold) -> Layout | None:
    """A gold of one label column (2 to 12 classes) and one count, answered as one row: a column per class
    headed by its label, and a total column."""
    labels, numbers = _label_columns(g), _ints(g) + _floats(g)
    if len(g.columns) != 2 or len(labels) != 1 or len(numbers) != 1:
        return None
    heads = [r[labels[0]] for r in g.rows]
    if not 2 <= len(heads) <= 12 or len(set(heads)) < len(heads):
        return None
    values = [r[numbers[0]] for r in g.rows]
    return [[*values, sum(values)]], [*heads, "total"]


def _year_range_sides(g: Gold) -> tuple[str, str] | None:
    """The years each side of a comparison of two runs of whole years covers ('2018-2020', '2021-2023'), read
    from the gold's date literals: all on the 1st of January, three boundaries, each side two years or more."""
    literals = set(re.findall(r"'(\d{4})-(\d\d)-(\d\d)'", g.sql))
    if any((m, d) != ("01", "01") for _, m, d in literals) or len(literals) != 3:
        return None
    first, middle, end = sorted(int(y) for y, _, _ in literals)
    if middle - first < 2 or end - middle < 2:
        return None
    return f"{first}|{middle - 1}", f"{middle}|{end - 1}"


_RANGE_STYLES = ("{}-{}", "{}–{}", "{}至{}", "{}年-{}年")


def _year_range_rows(g: Gold, *, swapped: bool) -> Layout | None:
    sides, ranges = _period_sides(g), _year_range_sides(g)
    stems = sorted({stem for _, stem in sides.values()})
    cell = {side: j for j, side in sides.items()}
    if ranges is None or not stems or len(cell) != 2 * len(stems):
        return None
    keys = [j for j in range(len(g.columns)) if j not in sides]
    if any(TIME_KEY_NAME.search(g.columns[j]) for j in keys):
        return None  # a period of the gold's own (period_rows_by_role)
    style = _RANGE_STYLES[random.Random(g.task.id).randrange(len(_RANGE_STYLES))]
    labels = [style.format(*side.split("|")) for side in ranges]
    rows: Rows = []
    for r in g.rows:
        numbers = [[r[cell["prev", stem]] for stem in stems], [r[cell["this", stem]] for stem in stems]]
        if swapped:
            if numbers[0] == numbers[1]:
                return None
            numbers.reverse()
        rows += [[*(r[j] for j in keys), label, *values] for label, values in zip(labels, numbers, strict=True)]
    return rows, [*(g.columns[j] for j in keys), "years", *(f"m{i}" for i in range(1, len(stems) + 1))]


def period_rows_by_year_ranges(g: Gold) -> Layout | None:
    """A comparison of two runs of whole years (prev_admissions for 2018-2020, this_admissions for 2021-2023) as
    two rows labelled by the years each covers ('2018-2020', '2018–2020', '2018至2020', '2018年-2020年')."""
    return _year_range_rows(g, swapped=False)


def finer_than_a_rounding_gold(g: Gold) -> Layout | None:
    """Where the gold's own SQL rounds (round(avg(zyts), 1) gives 8.6) and no wording asks it to, the finer value
    a query that did not round returns (8.63): it rounds to the gold at the gold's decimals."""
    cols = [j for j in _floats(g) if j < len(g.decimals) and (g.decimals[j] or 0) >= 1]
    if not cols:
        return None
    rows = [[_finer(v, g.decimals[j] or 0, 0.31) if j in cols else v for j, v in enumerate(r)] for r in g.rows]
    return rows, g.columns


def _finer(value: Any, decimals: int, by: float) -> Any:
    """A value moved by `by` units of its last decimal away from zero, with more digits than it was written with."""
    if value is None:
        return None
    step = (by + 0.0123) * 10.0**-decimals
    return value + step if value >= 0 else value - step


def _long(g: Gold, label: Callable[[int], str | None]) -> Layout | None:
    """The gold's numeric outputs as (keys..., label, value) rows, one per output and key; None where the
    gold has fewer than two numeric outputs, a key column that is not text, or no label for an output."""
    measures = [j for j in _ints(g) + _floats(g) if not TIME_KEY_NAME.search(g.columns[j])]
    keys = [j for j in range(len(g.columns)) if j not in measures]
    names = [label(j) for j in measures]
    if len(measures) < 2 or len(set(names)) < len(names) or None in names:
        return None
    rows = [[*(r[j] for j in keys), name, r[j]] for r in g.rows for j, name in zip(measures, names, strict=True)]
    return rows, [*(g.columns[j] for j in keys), "label", "value"]


def _meaning(g: Gold, j: int, language: str) -> str | None:
    outputs = {o.column.lower(): o for o in g.task.outputs}
    output = outputs.get(g.columns[j].lower())
    return output.meaning.get(Language(language)) if output else None


def long_form_zh(g: Gold) -> Layout | None:
    """Wide outputs as labelled rows, labelled by their Chinese meaning."""
    return _long(g, lambda j: _meaning(g, j, "zh"))


def long_form_en(g: Gold) -> Layout | None:
    """Wide outputs as labelled rows, labelled by their English meaning."""
    return _long(g, lambda j: _meaning(g, j, "en"))


def long_form_column_names(g: Gold) -> Layout | None:
    """Wide outputs as labelled rows, labelled by the gold's column names."""
    return _long(g, lambda j: g.columns[j])


def wide_form(g: Gold) -> Layout | None:
    """A long gold (keys, a label column of 2 to 12 values, one number) with one column per label."""
    numbers = _ints(g) + _floats(g)
    texts = _columns_where(g, lambda vs: all(isinstance(v, str) for v in vs))
    if len(numbers) != 1 or len(texts) < 2 or len(texts) + 1 != len(g.columns):
        return None
    value, label = numbers[0], texts[-1]
    keys = [j for j in texts if j != label]
    headers = list(dict.fromkeys(r[label] for r in g.rows))
    wide: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in g.rows:
        wide.setdefault(tuple(r[j] for j in keys), {})[r[label]] = r[value]
    if not 2 <= len(headers) <= 12 or sum(map(len, wide.values())) != len(g.rows) or len(wide) < 2:
        return None
    rows = [[*key, *(cells.get(h) for h in headers)] for key, cells in wide.items()]
    return rows, [*(g.columns[j] for j in keys), *headers]


def period_series(g: Gold) -> Layout | None:
    """A comparison of two months (each measure as a previous-month and a this-month column: zy_prev,
    zy_this) as a period series: one row per month the task names, one column per measure."""
    month = g.task.provenance.params.get("month")
    if not isinstance(month, str) or not MONTH.fullmatch(month):
        return None
    year, number = int(month[:4]), int(month[5:])
    previous = f"{year - 1}-12" if number == 1 else f"{year}-{number - 1:02d}"
    sides = _period_sides(g)
    stems = sorted({stem for _, stem in sides.values()})
    keys = [j for j in range(len(g.columns)) if j not in sides]
    cell = {side: j for j, side in sides.items()}
    if not stems or any(TIME_KEY_NAME.search(s) for s in stems) or len(cell) != 2 * len(stems):
        return None  # not every measure has both months, or a measure named for a period
    if any(_numeric(g.rows[0][j]) for j in keys):
        return None  # a number that is neither month's (a change) has no place in the series
    rows = [
        [*(r[j] for j in keys), label, *(r[cell[when, stem]] for stem in stems)]
        for r in g.rows
        for label, when in ((previous, "prev"), (month, "this"))
    ]
    return rows, [*(g.columns[j] for j in keys), "month", *stems]


def period_series_in_words(g: Gold) -> Layout | None:
    """The period series with each month named among words that say what was counted ('admissions in
    2024-11'): the month is still the row's period."""
    laid = period_series(g)
    if laid is None:
        return None
    rows, columns = laid
    at = columns.index("month")
    return [[*r[:at], f"admissions in {r[at]}", *r[at + 1 :]] for r in rows], columns


def period_rows_by_role(g: Gold) -> Layout | None:
    """A comparison keyed by its own period (quarter_start '2023-10' beside prev_avg_los, cur_avg_los) as two
    rows per key: a role ('before' / 'after'), the period written another way ('2023-Q3', '2023-Q4'), and
    each measure under a name of no words of the gold's (m1, m2)."""
    return _period_rows(g, swapped=False)


def _period_rows(g: Gold, *, swapped: bool) -> Layout | None:
    sides = _period_sides(g)
    stems = sorted({stem for _, stem in sides.values()})
    cell = {side: j for j, side in sides.items()}
    periods = [j for j in range(len(g.columns)) if j not in sides and TIME_KEY_NAME.search(g.columns[j])]
    if not stems or len(cell) != 2 * len(stems) or len(periods) != 1:
        return None
    keys = [j for j in range(len(g.columns)) if j not in sides and j not in periods]
    if any(_numeric(g.rows[0][j]) for j in keys):
        return None  # a number that is neither period's (a change) has no place in the rows
    quarters = "quarter" in g.columns[periods[0]].lower()
    rows: Rows = []
    for r in g.rows:
        later = _period_pair(r[periods[0]], quarters)
        if later is None:
            return None
        numbers = [[r[cell["prev", stem]] for stem in stems], [r[cell["this", stem]] for stem in stems]]
        if swapped:
            if numbers[0] == numbers[1]:
                return None
            numbers.reverse()
        for role, label, values in zip(("before", "after"), later, numbers, strict=True):
            rows.append([*(r[j] for j in keys), role, label, *values])
    return rows, [*(g.columns[j] for j in keys), "role", "period", *(f"m{i}" for i in range(1, len(stems) + 1))]


def _period_pair(value: Any, quarters: bool) -> tuple[str, str] | None:
    """The period before this one and this one, written 'YYYY-Qn' (quarters) or 'YYYY-MM'."""
    if not isinstance(value, str) or not (m := MONTH.fullmatch(value)):
        return None
    year, month = int(m[1]), int(m[2])
    if quarters:
        if month % 3 != 1:
            return None
        q = (month + 2) // 3
        return (f"{year - 1}-Q4" if q == 1 else f"{year}-Q{q - 1}"), f"{year}-Q{q}"
    return (f"{year - 1}-12" if month == 1 else f"{year}-{month - 1:02d}"), value


def _period_sides(g: Gold) -> dict[int, tuple[str, str]]:
    """Column -> ('prev' | 'this', the measure) for the gold's measures of either period; a measure may be NULL
    in some world (an average over no stays) and is still a measure."""
    measures = _columns_where(g, lambda vs: all(v is None or _numeric(v) for v in vs))
    return {j: side for j in measures if (side := _side(g.columns[j]))}


def _side(column: str) -> tuple[str, str] | None:
    """('prev' | 'this', the measure) of a column named for the previous or this period: zy_prev, cur_avg_los."""
    words = column.lower().split("_")
    found = [w for w in words if w in _SIDE_WORDS]
    if len(found) != 1:
        return None
    return _SIDE_WORDS[found[0]], "_".join(w for w in words if w != found[0])


_SIDE_WORDS = {"prev": "prev", "previous": "prev", "last": "prev", "this": "this", "cur": "this", "current": "this"}


def _label_columns(g: Gold) -> list[int]:
    """Text columns of two or more distinct labels that are no period (a group, a category)."""
    return [
        j
        for j in _columns_where(g, lambda vs: all(isinstance(v, str) for v in vs) and len(set(vs)) > 1)
        if not TIME_KEY_NAME.search(g.columns[j])
    ]


def labels_decorated(g: Gold) -> Layout | None:
    """Each group label written with a note after it ('心血管内科 (ksmc)'), as 'Cardiology (心血管内科)' is."""
    labels = _label_columns(g)
    if not labels:
        return None
    return [[f"{v} ({g.columns[j]})" if j in labels else v for j, v in enumerate(r)] for r in g.rows], g.columns


def zero_row_added(g: Gold) -> Layout | None:
    """A group the gold does not list, with nothing in it (every number 0), where the gold is no top N."""
    labels = _label_columns(g)
    if not labels or ties.has_limit(g.sql) or not (_ints(g) or _floats(g)):
        return None
    extra = [("Other" if j in labels else 0 if _numeric(v) else None) for j, v in enumerate(g.rows[0])]
    return [*g.rows, extra], g.columns


def _total_rows(g: Gold) -> tuple[int, int] | None:
    """(label column, row) of the gold's one total row labelled in words (全院), in a column of group labels."""
    for j in _label_columns(g):
        rows = [i for i, r in enumerate(g.rows) if is_total_label(r[j])]
        if len(rows) == 1 and g.rows[rows[0]][j] is not None:
            return j, rows[0]
    return None


def _total_words_on(g: Gold, *, the_total: bool) -> Layout | None:
    """TOTAL_IN_WORDS as the label of the gold's total row, or of another row (the total keeping its own)."""
    if (found := _total_rows(g)) is None:
        return None
    j, total = found
    row = total if the_total else next(n for n in range(len(g.rows)) if n != total)
    rows = [list(r) for r in g.rows]
    rows[row][j] = TOTAL_IN_WORDS
    return rows, g.columns


def total_labelled_in_words(g: Gold) -> Layout | None:
    """The total row labelled in other summary words ('(Hospital-wide)' for 全院)."""
    return _total_words_on(g, the_total=True)


# Mutations: a grader rejects each.


def total_label_on_a_group(g: Gold) -> Layout | None:
    """A group's row labelled as the total, the total row keeping its own label: two rows name the total."""
    return _total_words_on(g, the_total=False)


def wrong_total_row(g: Gold) -> Layout | None:
    """A row labelled as the total whose count of a unit that adds up (visits per department) is not the sum of
    the rows: the gold checks that total, so it is wrong."""
    return _summary_row(g, wrong=True)


def wide_row_count_changed(g: Gold) -> Layout | None:
    """The one wide row with a total column, one class's count off by one (the total left as it was)."""
    if (layout := wide_row_with_total(g)) is None:
        return None
    (row,), columns = layout
    changed = _changed(row[0], g.task.result.numeric_tolerance)
    return [[changed, *row[1:]]], columns


def period_ranges_swapped(g: Gold) -> Layout | None:
    """The two runs of years with each one's numbers under the other's label."""
    return _year_range_rows(g, swapped=True)


def finer_rounding_to_another(g: Gold) -> Layout | None:
    """Where the gold's SQL rounds, one value given finer and beyond the tolerance, rounding to another value at
    the gold's decimals (8.73 for 8.6): a finer answer is read at the gold's decimals, not moved to them."""
    tol = g.task.result.numeric_tolerance
    for j in _floats(g):
        d = g.decimals[j] if j < len(g.decimals) else None
        if not d:
            continue
        for i, row in enumerate(g.rows):
            v = row[j]
            if v is not None and abs(_finer(v, d, 1.3) - v) > 2 * tol * abs(v):
                rows = [list(r) for r in g.rows]
                rows[i][j] = _finer(v, d, 1.3)
                return rows, g.columns
    return None


def _changed(v: Any, tol: float) -> Any:
    return v + 1 if type(v) is int else v * (1 + 10 * tol) + 1


def one_number_changed(g: Gold) -> Layout | None:
    for i, row in enumerate(g.rows):
        for j, v in enumerate(row):
            if _numeric(v):
                rows = [list(r) for r in g.rows]
                rows[i][j] = _changed(v, g.task.result.numeric_tolerance)
                return rows, g.columns
    return None


def rows_out_of_order(g: Gold) -> Layout | None:
    """Where order matters: the first two rows that are not tied, swapped."""
    if g.groups is None:
        return None
    cut = next((i for i in range(1, len(g.rows)) if g.groups[i] != g.groups[i - 1]), None)
    if cut is None:
        return None
    rows = list(g.rows)
    rows[cut - 1], rows[cut] = rows[cut], rows[cut - 1]
    return rows, g.columns


def labels_swapped(g: Gold) -> Layout | None:
    """The labels of two groups with different numbers exchanged: each number under the other's name."""
    for j in _label_columns(g):
        for a in range(len(g.rows)):
            for b in range(a + 1, len(g.rows)):
                ra, rb = g.rows[a], g.rows[b]
                rest_a, rest_b = ([v for k, v in enumerate(r) if k != j] for r in (ra, rb))
                if ra[j] != rb[j] and rest_a != rest_b:
                    rows = [list(r) for r in g.rows]
                    rows[a][j], rows[b][j] = rb[j], ra[j]
                    return rows, g.columns
    return None


def period_rows_swapped(g: Gold) -> Layout | None:
    """The comparison as period rows with each period's numbers under the other period's label."""
    return _period_rows(g, swapped=True)


def coarse_written_as_2dp(g: Gold) -> Layout | None:
    """A fraction off by more than the tolerance, written to two decimals with a trailing 0 (0.70 for 0.74:
    a query that computed 0.70 did not round 0.74)."""
    tol = g.task.result.numeric_tolerance
    for i, row in enumerate(g.rows):
        for j in _floats(g):
            v = row[j]
            if v is not None and abs(round(v, 1) - v) > max(tol * abs(v), 1e-9) and abs(v) >= 0.05:
                rows: list[list[Any]] = [list(r) for r in g.rows]
                rows[i][j] = _written(round(v, 1), 2)
                return rows, g.columns
    return None


def row_dropped(g: Gold) -> Layout | None:
    return (g.rows[:-1], g.columns) if g.rows else None


def row_added(g: Gold) -> Layout | None:
    """A row like the first, every number changed."""
    if not g.rows or not any(map(_numeric, g.rows[0])):
        return None
    tol = g.task.result.numeric_tolerance
    return [*g.rows, [_changed(v, tol) if _numeric(v) else v for v in g.rows[0]]], g.columns


def row_duplicated(g: Gold) -> Layout | None:
    return ([*g.rows, g.rows[0]], g.columns) if g.rows else None


def name_added(g: Gold) -> Layout | None:
    """The gold's group labels alone, as a variant asking only which groups answers, with one name more: a row
    of names states its name, so it is no group with nothing in it."""
    labels = _label_columns(g)
    if not labels or ties.has_limit(g.sql):
        return None
    return [*([r[j] for j in labels] for r in g.rows), ["Other"] * len(labels)], [g.columns[j] for j in labels]


def day_moved(g: Gold) -> Layout | None:
    """Each date moved to another day of its month: the first, which also writes the month ('2018-02-28' as
    '2018-02-01'), or the second for the first. A day holds no month, so it names no other day of it."""
    if not any(isinstance(v, str) and DAY.fullmatch(v) for r in g.rows for v in r):
        return None
    return [[_day_off(v) if isinstance(v, str) and DAY.fullmatch(v) else v for v in r] for r in g.rows], g.columns


def _day_off(day: str) -> str:
    return f"{day[:8]}{'02' if day.endswith('-01') else '01'}"


def unit_not_converted(g: Gold) -> Layout | None:
    floats = _floats(g)
    if "unit" not in g.task.tags or not floats:
        return None
    return [[v * 18 if j in floats else v for j, v in enumerate(r)] for r in g.rows], g.columns


def count_for_fraction(g: Gold) -> Layout | None:
    """Each column of fractions (a rate, a mean) replaced by whole numbers near it: a count that lies within
    the tolerance of a percentage is still no percentage."""
    floats = _floats(g)
    if not floats:
        return None
    return [[round(v) if j in floats else v for j, v in enumerate(r)] for r in g.rows], g.columns


def empty_result(g: Gold) -> Layout | None:
    return ([], g.columns) if g.rows else None


LAYOUTS: dict[str, Transform] = {
    f.__name__: f
    for f in (
        extra_columns,
        permuted_columns,
        renamed_columns,
        shuffled_rows,
        tie_reorder,
        integers_as_floats,
        rounded_to_2_decimals,
        rounded_to_1_by_query,
        rate_as_percentage,
        total_row,
        described_total_row,
        unchecked_total_row,
        finer_than_a_rounding_gold,
        periods_spelt_out,
        period_series,
        period_series_in_words,
        period_rows_by_role,
        period_rows_by_year_ranges,
        labels_decorated,
        zero_row_added,
        total_labelled_in_words,
        long_form_zh,
        long_form_en,
        long_form_column_names,
        wide_form,
        wide_row_with_total,
    )
}
MUTATIONS: dict[str, Transform] = {
    f.__name__: f
    for f in (
        one_number_changed,
        coarse_written_as_2dp,
        finer_rounding_to_another,
        rows_out_of_order,
        row_dropped,
        row_added,
        row_duplicated,
        name_added,
        day_moved,
        labels_swapped,
        total_label_on_a_group,
        wrong_total_row,
        period_rows_swapped,
        period_ranges_swapped,
        wide_row_count_changed,
        unit_not_converted,
        count_for_fraction,
        empty_result,
    )
}
PERIOD_MOVED = "period_moved"  # the gold's date literals a month later, run on the snapshot
DATE_LITERAL = re.compile("'" + DAY.pattern)  # a day as SQL writes it


def _month_later(sql: str) -> str | None:
    def shift(m: re.Match[str]) -> str:
        year, month = int(m[1]), int(m[2])
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        return f"'{year:04d}-{month:02d}-{min(int(m[3]), 28):02d}"

    moved = DATE_LITERAL.sub(shift, sql)
    return moved if moved != sql else None


@dataclass
class TransformResult:
    name: str
    kind: str  # layout | mutation
    applied: int = 0
    accepted: int = 0
    explained: int = 0  # mutations accepted because they are another gold's answer, or change nothing (not
    # counted as applied or accepted)
    failures: list[str] = field(default_factory=list)  # task ids: a layout rejected, a mutation accepted

    @property
    def ok(self) -> bool:
        return not self.failures


def audit(tasks: list[Task], golds: GoldRunner, progress: Progress = quiet) -> list[TransformResult]:
    """Every transform on every answerable task's first gold."""
    gold = GoldCache(golds)
    results = {name: TransformResult(name, "layout") for name in LAYOUTS}
    results |= {name: TransformResult(name, "mutation") for name in [*MUTATIONS, PERIOD_MOVED]}
    answerable = [t for t in tasks if t.answerable and t.gold_sql]
    for n, task in enumerate(answerable, 1):
        if n % 50 == 0:
            progress(f"audited {n} of {len(answerable)} tasks")
        try:
            g = _gold(task, gold)
        except DataError as exc:  # validate names such a gold; here it has no result
            raise DataError(f"{task.id}: its gold does not run on this snapshot: {exc}") from exc
        for name, layout in _layouts(g, golds):
            result = results[name]
            # a layout of some of the gold's columns is graded as the variant that asks only for them
            asked = layout[1] if set(layout[1]) < set(g.columns) else None
            accepted = gold_match(task, prediction_of(layout[1], layout[0]), gold, asked)[0]
            if accepted and result.kind == "mutation" and _explained(g, layout, gold, asked):
                result.explained += 1
                continue
            result.applied += 1
            result.accepted += accepted
            if accepted is (result.kind == "mutation"):
                result.failures.append(task.id)
    return list(results.values())


def _gold(task: Task, gold: GoldCache) -> Gold:
    columns, _ = gold.get(task.gold_sql[0])
    ordered = gold.acceptable(task.gold_sql[0], task.result.order_matters)[0]
    rows = [[jsonable(v) for v in r] for r in ordered.rows]
    return Gold(task, task.gold_sql[0], columns, rows, ordered.groups, gold.decimals(task.gold_sql[0]))


def _layouts(g: Gold, golds: GoldRunner) -> Iterator[tuple[str, Layout]]:
    for name, transform in (LAYOUTS | MUTATIONS).items():
        if (layout := transform(g)) is not None:
            yield name, layout
    moved = _month_later(g.sql)
    if moved is not None:
        try:
            result = golds.result(moved)
        except QueryError:
            return
        yield PERIOD_MOVED, ([[jsonable(v) for v in r] for r in result.rows], result.columns)


def _explained(g: Gold, layout: Layout, gold: GoldCache, asked: list[str] | None) -> bool:
    """An accepted mutation that is the gold itself (a moved period the data does not tell apart) or, laid out
    as it is, the answer of another of the task's golds (a class count changed to another reading's)."""
    rows, columns = layout
    if match(rows, g.rows, rel_tol=g.task.result.numeric_tolerance):
        return True
    others = g.task.model_copy(update={"gold_sql": g.task.gold_sql[1:]})
    return bool(others.gold_sql) and gold_match(others, prediction_of(columns, rows), gold, asked)[0]


def summary(results: list[TransformResult]) -> list[str]:
    lines = [f"{'transform':<28}{'kind':<10}{'tasks':>7}{'accepted':>10}{'rate':>8}  failures"]
    for r in results:
        rate = f"{r.accepted / r.applied:.0%}" if r.applied else "-"
        note = f"{len(r.failures)}" + (f" ({r.explained} explained: another gold, or unchanged)" if r.explained else "")
        lines.append(f"{r.name:<28}{r.kind:<10}{r.applied:>7}{r.accepted:>10}{rate:>8}  {note}")
    return lines
