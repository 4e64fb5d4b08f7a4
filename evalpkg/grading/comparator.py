"""Execution match (SPEC §9): "correct" means what a careful human grader accepts, and nothing more lenient.

Rules of COMPARATOR_VERSION 5: every gold column needs its own prediction column (extra columns, column
order and names don't matter; found by assignment, identical columns interchangeable); rows are bags, in the
gold's ORDER BY order only where order matters (ties on the keys in any order); integers exact; fractional
numbers within the task's relative tolerance, rows paired by a proper matching, and a gold written to more
decimals than a prediction with at least one is rounded to the prediction's (the question rarely says how
to round) where that moves no value by more than 5% of itself (12.3 for 12.34, 0.7 for 0.71, not 0.1 for
0.12 or 0.0 for 0.04; a gold ending in 5 may round either way); a gold column of fractions (a rate, a mean)
is never stood for by whole numbers (a count); one month as 1..12 (when the
other side's labels lie in one year), 'YYYY-MM', a date or midnight on the 1st; booleans = 't'/'f'/'true'/
'false'; text trimmed and NFKC-normalised; NULL equals only NULL; empty matches only empty; a failed or
truncated result never matches. Several golds (layout alternatives): the caller tries each.
Added in 4: rows tied on the gold's ORDER BY keys (hidden key columns included) match in any order, and
where its LIMIT cuts a tie any choice of the tied rows is accepted (ties.py); a summary row (a total of the
rows it covers) may be added or left out (summary.py); summation noise below 1e-9 is no difference; a rate
may be written as a fraction or a percentage. Changed in 5: the coarser-precision rule reads by how far
rounding moves each value (it was: the largest keeps two significant figures); whole numbers never stand
for a column of fractions, however close within the task's tolerance.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import chain, count, pairwise, starmap
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import sqlglot

from evalpkg.sql.order import order_targets

COMPARATOR_VERSION = 5
MAX_ASSIGNMENT_CHECKS = 1000  # only columns with equal values in different rows make the search branch
MAX_DECIMALS = 10  # a number written with more decimals was not rounded
MAX_ROUNDING = 0.05  # a gold is read at a coarser prediction's decimals when that moves no value more than this
UNROUNDED = MAX_DECIMALS + 1
NOISE = 1e-9  # absolute: what float summation leaves where the exact value is an integer
Row = Sequence[Any]
Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.intp]


@dataclass(frozen=True)
class MatchResult:
    ok: bool
    reason: str


class _Marker:
    """NULL, booleans and non-finite floats: equal only to themselves."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NULL, FALSE, TRUE, NAN, NEG_INF, POS_INF = map(_Marker, ("NULL", "false", "true", "NaN", "-inf", "inf"))
_BOOL_WORDS = {"t": TRUE, "true": TRUE, "f": FALSE, "false": FALSE}
_FIRST_OF_MONTH = re.compile(r"(\d{4})-(0[1-9]|1[0-2])-01(?:[ T]00:00(?::00(?:\.0+)?)?(?:Z|[+-]\d\d(?::?\d\d)?)?)?")
_LABEL = re.compile(r"(\d{4})-\d\d")
_SPACE = re.compile(r"\s")
_MONTHS = set(range(1, 13))
_nfkc = partial(unicodedata.normalize, "NFKC")


def _period(s: str) -> str:
    """A date or midnight on the 1st as its month's 'YYYY-MM' label."""
    m = _FIRST_OF_MONTH.fullmatch(s)
    return f"{m[1]}-{m[2]}" if m else s


def _text(s: str) -> Any:
    s = _nfkc(s).strip()
    return _BOOL_WORDS.get(s) or _period(s)


def _float(v: float) -> Any:
    return v if math.isfinite(v) else NAN if v != v else POS_INF if v > 0 else NEG_INF


def _token(v: Any) -> Any:
    """One value in canonical form; dates and times written as the executor writes the agent's."""
    if v is None:
        return NULL
    if isinstance(v, bool):
        return TRUE if v else FALSE
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, decimal.Decimal):  # scale 0 (count, sums of integers, round) is an integer type
        exponent = v.as_tuple().exponent
        return int(v) if isinstance(exponent, int) and exponent >= 0 else _float(float(v))
    if isinstance(v, str):
        return _text(v)
    if isinstance(v, dt.datetime):
        return _text(v.isoformat(sep=" "))
    if isinstance(v, dt.date | dt.time):
        return _text(v.isoformat())
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes | memoryview):
        return "<binary>"
    if isinstance(v, list | tuple | dict):
        return json.dumps(v, sort_keys=True, default=str, ensure_ascii=False)
    return _text(str(v))


def _texts(values: list[str]) -> tuple[list[Any], int | None]:
    """_text over a column, looking at the joined column first so that most columns pass untouched; and the
    total length, a cheap signature (None where tokens are not plain strings)."""
    joined = "\x00".join(values)  # NUL never occurs in PostgreSQL text
    if not joined.isascii() and not unicodedata.is_normalized("NFKC", joined):
        values = list(map(_nfkc, values))
        joined = "\x00".join(values)
    if _SPACE.search(joined):
        values = list(map(str.strip, values))
        joined = "\x00".join(values)
    tokens: list[Any] = values
    if "-01" in joined and max(map(len, values)) >= 10 and _FIRST_OF_MONTH.search(joined):
        tokens = list(map(_period, tokens))
    if any(f"\x00{word}\x00" in f"\x00{joined}\x00" for word in _BOOL_WORDS):
        tokens = list(map(_BOOL_WORDS.get, tokens, tokens))
    return tokens, len(joined) if tokens is values else None


def _floats(values: Sequence[Any]) -> Floats | None:
    try:
        return np.array(values, dtype=np.float64)
    except OverflowError:  # an integer beyond float range: its column compares exactly
        return None


def _without_noise(numbers: Floats, values: list[Any]) -> tuple[Floats, list[Any]]:
    """A float within summation noise of an integer is that integer (1e-13 is 0, 2.9999999999999996 is 3);
    NOISE is far below any tolerance, so 2.9999999 stays a near miss of an integer gold."""
    nearest = np.rint(numbers)
    noisy = (numbers != nearest) & (np.abs(numbers - nearest) <= np.maximum(NOISE, NOISE * 1e-3 * np.abs(numbers)))
    if not noisy.any():
        return numbers, values
    numbers = np.where(noisy, nearest, numbers)
    return numbers, numbers.tolist()


def _count_in(sorted_values: Floats, values: Floats) -> Ints:
    """How often each of `values` occurs in `sorted_values`."""
    return np.searchsorted(sorted_values, values, "right") - np.searchsorted(sorted_values, values, "left")


def _decimals(x: Floats, start: int = 0) -> int:
    """The fewest decimals that write every value exactly, UNROUNDED beyond MAX_DECIMALS."""
    for d in range(start, MAX_DECIMALS + 1):
        if (np.round(x, d) == x).all():
            return d
    return UNROUNDED


def _half_away(x: Floats, decimals: int) -> tuple[Floats, npt.NDArray[np.bool_]]:
    """|x| in units of the last decimal, rounded half away from zero as PostgreSQL rounds numeric, and where
    |x| lay on a half."""
    units = np.abs(x) * 10.0**decimals
    eps = 1e-9 * np.maximum(1.0, units)
    return np.floor(units + 0.5 + eps), np.abs(units - np.floor(units) - 0.5) <= eps


@dataclass
class _Column:
    tokens: list[Any]
    kind: str  # "int", "float" (where tolerance applies) or "other"
    numbers: Floats | None = None  # numeric kinds: the values as floats, 0.0 at NULL, NaN and infinities
    text_length: int | None = None
    has_markers: bool = True
    rate: bool = False  # a gold rate: a prediction may give it as a fraction or as a percentage
    coarser: dict[tuple[int, int], _Column] = field(default_factory=dict, repr=False, compare=False)  # rounded()
    rescaled: dict[int, _Column] = field(default_factory=dict, repr=False, compare=False)  # as_rate_of()
    units: dict[int, Floats] = field(default_factory=dict, repr=False, compare=False)  # sorted_units()

    @classmethod
    def of(cls, values: list[Any]) -> _Column:
        types = set(map(type, values))
        if types <= {int, float}:  # the common cases first, each in one pass over the values
            numbers = _floats(values)
            if numbers is not None and np.isfinite(numbers).all():
                if float not in types:
                    return cls(values, "int", numbers, has_markers=False)
                numbers, tokens = _without_noise(numbers, values)
                return cls(tokens, "float", numbers, has_markers=False)
        if types == {str}:
            tokens, length = _texts(values)
            return cls(tokens, "other", text_length=length)
        tokens = list(map(_token, values))
        kinds = {type(t) for t in tokens} - {_Marker}
        if not kinds or not kinds <= {int, float}:
            return cls(tokens, "other")
        numbers = _floats([0.0 if type(t) is _Marker else t for t in tokens])
        if float not in kinds or numbers is None:
            return cls(tokens, "int", numbers)
        numbers, cleaned = _without_noise(numbers, tokens)
        tokens = [t if type(t) is _Marker else v for t, v in zip(tokens, cleaned, strict=True)]
        return cls(tokens, "float", numbers)

    @cached_property
    def decimals(self) -> int:
        """The fewest decimals that write every value (the executor hands numerics over as floats, so a
        rounded 2.50 reads as 2.5). A sample first: most computed float columns are UNROUNDED."""
        if self.numbers is None:
            return 0
        sample = _decimals(self.numbers[:64])
        return sample if sample == UNROUNDED else _decimals(self.numbers, sample)

    def rounded(self, decimals: int, like: _Column) -> _Column:
        """The column at fewer decimals. A value on a half is rounded away from zero, or towards it where
        `like` (the other side) holds that value and not the other: the half may itself be a rounding.
        Remembered per (decimals, like): the search compares the same pair many times."""
        plain = (decimals, 0)  # no value on a half: one rounded column, whatever `like` holds
        key = plain if plain in self.coarser else (decimals, id(like))
        if key not in self.coarser:
            column, on_halves = self._rounded(decimals, like)
            self.coarser[key if on_halves else plain] = column
            return column
        return self.coarser[key]

    def _rounded(self, decimals: int, like: _Column) -> tuple[_Column, bool]:
        assert self.numbers is not None
        whole, half = _half_away(self.numbers, decimals)
        sign = np.sign(self.numbers)
        on_halves = bool(half.any())
        if like.numbers is not None and on_halves:
            ties = np.flatnonzero(half)
            away = sign[ties] * whole[ties]
            candidates = np.unique(np.concatenate([away, away - sign[ties]]))
            theirs = _count_in(like.sorted_units(decimals), candidates)
            mine = _count_in(np.sort((sign * whole)[~half]), candidates)
            left = Counter(dict(zip(candidates.tolist(), (theirs - mine).tolist(), strict=True)))
            for i in ties:
                away, toward = sign[i] * whole[i], sign[i] * (whole[i] - 1)
                if left[away] <= 0 < left[toward]:
                    whole[i] -= 1
                left[sign[i] * whole[i]] -= 1
        numbers = sign * whole / 10.0**decimals
        tokens = numbers.tolist()
        if self.has_markers:
            tokens = [t if type(t) is _Marker else v for t, v in zip(self.tokens, tokens, strict=True)]
        return _Column(tokens, "float", numbers, has_markers=self.has_markers), on_halves

    def sorted_units(self, decimals: int) -> Floats:
        """The values in units of that decimal, sorted (remembered: every finer column asks for them)."""
        assert self.numbers is not None
        if decimals not in self.units:
            self.units[decimals] = np.sort(np.rint(self.numbers * 10.0**decimals))
        return self.units[decimals]

    def as_rate_of(self, gold: _Column) -> _Column:
        """This column in the gold rate's scale: a percentage (12.3) of a fraction (0.123) divided by 100,
        a fraction of a percentage times 100; itself where the magnitudes say neither. Remembered per gold."""
        if id(gold) not in self.rescaled:
            self.rescaled[id(gold)] = self._as_rate_of(gold)
        return self.rescaled[id(gold)]

    def _as_rate_of(self, gold: _Column) -> _Column:
        assert self.numbers is not None and gold.numbers is not None
        mine, theirs = np.abs(self.numbers).max(), np.abs(gold.numbers).max()
        ratio = mine / theirs if mine and theirs else 1.0
        shift = -2 if 50 <= ratio <= 200 else 2 if 0.005 <= ratio <= 0.02 else 0
        if not shift:
            return self
        numbers = self.numbers * 10.0**shift
        if self.decimals != UNROUNDED:  # written to d decimals, it is now written to d - shift
            numbers = np.round(numbers, max(self.decimals - shift, 0))
        tokens = numbers.tolist()
        if self.has_markers:
            tokens = [t if type(t) is _Marker else v for t, v in zip(self.tokens, tokens, strict=True)]
        return _Column(tokens, "float", numbers, has_markers=self.has_markers)

    @cached_property
    def fractional(self) -> bool:
        """Some value shows at two decimals: a fraction, not float imprecision around a whole number."""
        return self.numbers is not None and bool((np.abs(self.numbers - np.rint(self.numbers)) >= 0.005).any())

    @cached_property
    def bag(self) -> dict[Any, int]:
        return dict(Counter(self.tokens))

    @cached_property
    def span(self) -> Floats | None:
        return None if self.numbers is None else np.array([self.numbers.min(), self.numbers.max()])

    @cached_property
    def shape(self) -> list[Any] | None:
        """Where the NULLs and non-finite values of a numeric column are (None: nowhere)."""
        if not self.has_markers or not any(type(t) is _Marker for t in self.tokens):
            return None
        return [t if type(t) is _Marker else None for t in self.tokens]

    @cached_property
    def month_numbers(self) -> bool:
        return self.kind != "other" and all(t in _MONTHS for t in self.tokens)  # NULLs: left alone

    @cached_property
    def label_year(self) -> str | None:
        """The year, when every value is a 'YYYY-MM' label of that one year (NULLs: none)."""
        years = {m[1] if isinstance(t, str) and (m := _LABEL.fullmatch(t)) else None for t in self.tokens}
        return years.pop() if len(years) == 1 and None not in years else None

    def as_labels(self, year: str) -> _Column:
        return _Column([f"{year}-{int(t):02d}" for t in self.tokens], "other")


def _view(g: _Column, p: _Column) -> tuple[_Column, _Column]:
    """The pair as compared: a rate in the gold's scale; month numbers become labels of the one year the
    other side names; a fractional gold is read at a coarser prediction's decimals."""
    if g.rate and g.numbers is not None and p.numbers is not None:
        p = p.as_rate_of(g)
    if g.month_numbers and p.label_year:
        return g.as_labels(p.label_year), p
    if p.month_numbers and g.label_year:
        return g, p.as_labels(g.label_year)
    if g.kind == p.kind == "float" and g.decimals > p.decimals:
        return _at_coarser_precision(g, p)
    return g, p


def _at_coarser_precision(g: _Column, p: _Column) -> tuple[_Column, _Column]:
    """A gold finer than a prediction with decimals, rounded to those where the rounding moves no value by
    more than MAX_ROUNDING of itself (a grader takes 12.3 for 12.34, 0.8% for 0.79% and 0.7% for 0.71%, but
    not 0.1 for 0.12 or 0.0% for 0.04%). A prediction finer than the gold is left to the task's tolerance:
    a float gold does not say whether it was rounded."""
    assert g.numbers is not None
    d = p.decimals
    if not 1 <= d < g.decimals:
        return g, p
    rounded = g.rounded(d, like=p)
    assert rounded.numbers is not None
    moved = np.abs(rounded.numbers - g.numbers)
    if (moved <= MAX_ROUNDING * np.abs(g.numbers)).all():
        return rounded, p
    return g, p


def _tolerant(g: _Column, p: _Column) -> tuple[Floats, Floats] | None:
    """The pair's numbers where tolerance applies: a fractional gold column (an integer one is exact)."""
    if g.kind == "float" and g.numbers is not None and p.numbers is not None:
        return g.numbers, p.numbers
    return None


def _close(a: Floats, b: Floats, rel_tol: float) -> npt.NDArray[np.bool_]:
    """math.isclose elementwise, symmetric in a and b."""
    return np.abs(a - b) <= np.maximum(rel_tol * np.maximum(np.abs(a), np.abs(b)), _abs_tol(rel_tol))


def _abs_tol(rel_tol: float) -> float:
    return rel_tol * 1e-3 if rel_tol else 1e-12  # near zero a relative tolerance means nothing


def _same_kind(g: _Column, p: _Column) -> bool:
    """A gold column that holds fractions (a rate, a mean: a value that shows at two decimals) is never
    stood for by a column of whole numbers (a count): 71 patients is not 71.11%, however close. A rate
    given in the other scale (whole percentages of a fraction) is compared in the gold's."""
    if g.rate and g.numbers is not None and p.numbers is not None:
        p = p.as_rate_of(g)
    return not (p.kind == "int" and g.fractional)


def _plausible(g: _Column, p: _Column, rel_tol: float) -> bool:
    """Cheap necessary condition for _compatible: numbers against numbers with the same smallest and largest
    values, text against text of the same total length, a fraction never against whole numbers."""
    if not _same_kind(g, p):
        return False
    g, p = _view(g, p)
    if (g.kind == "other") != (p.kind == "other"):
        return False
    if g.span is None or p.span is None:
        return None in (g.text_length, p.text_length) or g.text_length == p.text_length
    return bool(_close(g.span, p.span, rel_tol).all() if _tolerant(g, p) else np.array_equal(g.span, p.span))


def _compatible(g: _Column, p: _Column, rel_tol: float) -> bool:
    """The same bag of values (with tolerance, sorted pairing is a proper matching in one dimension)."""
    if not _same_kind(g, p):
        return False
    g, p = _view(g, p)
    numbers = _tolerant(g, p)
    if numbers is None:
        return g.bag == p.bag
    a, b = numbers
    return Counter(g.shape or ()) == Counter(p.shape or ()) and bool(_close(np.sort(a), np.sort(b), rel_tol).all())


def _rows_equal(pairs: list[tuple[_Column, _Column]], segments: list[int] | None, rel_tol: float) -> bool:
    """Bag equality of the rows on these column pairs; segments pin rows to the gold's ordered positions."""
    n = len(pairs[0][0].tokens)
    g_exact: list[list[Any]] = [segments] if segments else []
    p_exact: list[list[Any]] = [segments] if segments else []
    g_num: list[Floats] = []
    p_num: list[Floats] = []
    for g, p in starmap(_view, pairs):
        numbers = _tolerant(g, p)
        if numbers is None:
            g_exact.append(g.tokens)
            p_exact.append(p.tokens)
            continue
        if g.shape or p.shape:  # where the markers are must agree exactly
            g_exact.append(g.shape or [None] * n)
            p_exact.append(p.shape or [None] * n)
        g_num.append(numbers[0])
        p_num.append(numbers[1])
    for j, anchor in enumerate(g_exact):  # the common case: a gold column of distinct values pairs the rows
        row_of = dict(zip(anchor, count()))
        if len(row_of) == n:
            where = list(map(row_of.get, p_exact.pop(j)))
            del g_exact[j]
            return None not in where and _paired_rows_equal(
                cast(list[int], where), g_exact, p_exact, g_num, p_num, rel_tol
            )
    if not g_num:
        return dict(Counter(zip(*g_exact, strict=True))) == dict(Counter(zip(*p_exact, strict=True)))
    codes = _codes(g_exact, p_exact, n)
    return codes is not None and _sorted_rows_equal(*codes, np.column_stack(g_num), np.column_stack(p_num), rel_tol)


def _codes(g_exact: list[list[Any]], p_exact: list[list[Any]], n: int) -> tuple[Ints, Ints] | None:
    """The rows' exact parts as integers, for numpy (None: a prediction row's exact part is not the gold's)."""
    if not g_exact:
        return np.zeros(n, np.intp), np.zeros(n, np.intp)
    g_keys, p_keys = list(zip(*g_exact, strict=True)), list(zip(*p_exact, strict=True))
    codes = dict(zip(g_keys, count()))
    p_codes = list(map(codes.get, p_keys))
    if None in p_codes:
        return None
    return np.array(list(map(codes.__getitem__, g_keys)), dtype=np.intp), np.array(p_codes, dtype=np.intp)


def _paired_rows_equal(
    where: list[int],
    g_exact: list[list[Any]],
    p_exact: list[list[Any]],
    g_num: list[Floats],
    p_num: list[Floats],
    rel_tol: float,
) -> bool:
    """Pred row i stands against gold row where[i]."""
    index = np.array(where, dtype=np.intp)
    if np.bincount(index, minlength=len(where)).max() != 1:
        return False
    if any(list(map(g.__getitem__, where)) != p for g, p in zip(g_exact, p_exact, strict=True)):
        return False
    return all(_close(g[index], p, rel_tol).all() for g, p in zip(g_num, p_num, strict=True))


def _sorted_rows_equal(g_code: Ints, p_code: Ints, gold: Floats, pred: Floats, rel_tol: float) -> bool:
    """Rows with equal exact parts (codes) paired by sorting on the tolerant columns; where that pairing
    fails, a proper matching decides."""
    g_order = np.lexsort([*gold.T[1::-1], g_code])  # by exact part, then the first two tolerant columns
    p_order = np.lexsort([*pred.T[1::-1], p_code])
    g_code, gold, p_code, pred = g_code[g_order], gold[g_order], p_code[p_order], pred[p_order]
    if not np.array_equal(g_code, p_code):
        return False
    near = _close(gold, pred, rel_tol).all(axis=1)
    if near.all():
        return True
    # Cut the sorted rows where no tolerant pair can straddle the cut (another exact part, or a gap wider than
    # the tolerance on the sorted column) and match properly only the blocks where sorted pairing failed.
    top, bottom = np.maximum(gold[:, 0], pred[:, 0]), np.minimum(gold[:, 0], pred[:, 0])
    gap = (bottom[1:] > top[:-1]) & ~_close(top[:-1], bottom[1:], rel_tol)
    starts = np.concatenate([[0], np.flatnonzero((g_code[1:] != g_code[:-1]) | gap) + 1, [len(gold)]])
    for block in np.unique(np.searchsorted(starts, np.flatnonzero(~near), "right") - 1):
        lo, hi = starts[block], starts[block + 1]
        if hi - lo == 1 or not _matching_within_tolerance(gold[lo:hi], pred[lo:hi], rel_tol):
            return False
    return True


def _matching_within_tolerance(gold: Floats, pred: Floats, rel_tol: float) -> bool:
    """A perfect matching of gold to pred rows within tolerance, as a max flow from distinct gold rows to
    distinct pred rows; only pairs within a window on the most varied column are tried."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    g_rows, g_count = np.unique(gold, axis=0, return_counts=True)
    p_rows, p_count = np.unique(pred, axis=0, return_counts=True)
    col = max(range(gold.shape[1]), key=lambda c: len(np.unique(g_rows[:, c])))
    order = np.argsort(p_rows[:, col], kind="stable")
    keys, x = p_rows[order, col], g_rows[:, col]
    reach = 1.000001 * np.maximum(np.abs(x) * rel_tol / (1 - rel_tol), _abs_tol(rel_tol)) if rel_tol < 1 else np.inf
    lo, hi = np.searchsorted(keys, x - reach, "left"), np.searchsorted(keys, x + reach, "right")
    counts = hi - lo
    g_of = np.repeat(np.arange(len(g_rows)), counts)
    p_of = order[np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())]
    near = _close(g_rows[g_of], p_rows[p_of], rel_tol).all(axis=1)
    a, b = len(g_rows), len(p_rows)  # nodes: source 0, gold 1..a, pred a+1..a+b, sink a+b+1
    tails = np.concatenate([np.zeros(a, np.intp), 1 + g_of[near], 1 + a + np.arange(b)])
    heads = np.concatenate([1 + np.arange(a), 1 + a + p_of[near], np.full(b, a + b + 1)])
    caps = np.concatenate([g_count, np.full(near.sum(), len(gold)), p_count]).astype(np.int32)
    graph = csr_matrix((caps, (tails, heads)), shape=(a + b + 2, a + b + 2))
    return int(maximum_flow(graph, 0, a + b + 1).flow_value) == len(gold)


def tie_groups(keys: Sequence[tuple[Any, ...]]) -> list[int]:
    """Per row, its run of equal sort keys: rows of one run may trade places."""
    groups = [0] if keys else []
    for prev, cur in pairwise(keys):
        groups.append(groups[-1] + (prev != cur))
    return groups


def _segments(
    gold: list[_Column], n: int, order_matters: bool, order_keys: list[int] | None, groups: Sequence[int] | None
) -> list[int] | None:
    """Per gold row, its run of ties on the ORDER BY keys (None: order ignored; unknown keys: every row)."""
    if not order_matters:
        return None
    if groups is not None:
        return list(groups)
    if not order_keys or not all(0 <= k < len(gold) for k in order_keys):
        return list(range(n))
    return tie_groups(list(zip(*(gold[k].tokens for k in order_keys), strict=True)))


def _find_assignment(
    candidates: list[list[int]], pred: list[_Column], rows_ok: Callable[[dict[int, int]], bool]
) -> str:
    """Depth-first over gold -> pred column choices, most constrained gold column first, checking the rows of
    the columns chosen so far at every real choice and at the end. Identical pred columns form one class, so
    choosing among them never branches. Returns "" when an assignment matches, else why none does."""
    classes: dict[Any, list[int]] = {}
    ambiguous = any(len(c) > 1 for c in candidates)
    for p in sorted({p for c in candidates for p in c}):
        classes.setdefault(tuple(pred[p].tokens) if ambiguous else p, []).append(p)
    members = {m[0]: m for m in classes.values()}
    rep = {p: m[0] for m in classes.values() for p in m}
    order = sorted(range(len(candidates)), key=lambda j: len({rep[p] for p in candidates[j]}))
    chosen: dict[int, int] = {}
    used: Counter[int] = Counter()
    checks = leaves = 0

    def walk(depth: int) -> bool:
        nonlocal checks, leaves
        if depth == len(order):
            return True
        j, last = order[depth], depth == len(order) - 1
        options = sorted(r for r in {rep[p] for p in candidates[j]} if used[r] < len(members[r]))
        for r in options:
            chosen[j] = members[r][used[r]]
            used[r] += 1
            leaves += last
            needs_check = len(options) > 1 or last
            checks += needs_check
            if (not needs_check or (checks <= MAX_ASSIGNMENT_CHECKS and rows_ok(chosen))) and walk(depth + 1):
                return True
            used[r] -= 1
            del chosen[j]
        return False

    if walk(0):
        return ""
    if not leaves:
        return "gold columns cannot each get a distinct prediction column"
    if checks > MAX_ASSIGNMENT_CHECKS:
        return f"column assignment still ambiguous after {MAX_ASSIGNMENT_CHECKS} row checks"
    return "rows differ on the matched columns"


def order_key_columns(gold_sql: str, columns: list[str]) -> list[int] | None:
    """Output positions the gold's final ORDER BY sorts on (None: cannot tell, or it sorts on something
    no output is); read by ties.order_targets, as the tie rules read it."""
    try:
        tree = sqlglot.parse_one(gold_sql, dialect="postgres")
    except sqlglot.errors.SqlglotError:
        return None
    if tree.args.get("order") is None:
        return None
    targets = order_targets(tree, [c.lower() for c in columns])
    return None if None in targets else [t for t in targets if t is not None]


def _columns(rows: Sequence[Row]) -> list[_Column]:
    values, width = list(chain.from_iterable(rows)), len(rows[0])  # one pass over the rows: the fastest way
    return [_Column.of(values[i::width]) for i in range(width)]


def explain(
    pred: Sequence[Row] | None,
    gold: Sequence[Row],
    *,
    order_matters: bool = False,
    rel_tol: float = 1e-6,
    order_keys: list[int] | None = None,
    truncated: bool = False,
    pinned: Mapping[int, int] | None = None,
    groups: Sequence[int] | None = None,
    rates: Collection[int] = (),
) -> MatchResult:
    """Whether pred matches this gold, and why not. pred None: the agent has no successful result;
    truncated: either result hit the fetch cap, so only a sample of it is at hand; pinned: gold column ->
    the prediction column that carries its name; groups: per gold row, its tie group under the ORDER BY
    (else read from order_keys); rates: gold columns that are a rate, given alike as a fraction or a
    percentage."""
    if truncated:
        return MatchResult(False, "a result was truncated at the fetch cap; a sample is never compared")
    if pred is None:
        return MatchResult(False, "no successful result")
    if len(pred) != len(gold):
        return MatchResult(False, f"{len(pred)} rows, gold has {len(gold)}")
    if not gold:
        return MatchResult(True, "match: both empty")
    width, pred_widths = len(gold[0]), set(map(len, pred))
    if len(pred_widths) != 1 or pred_widths.pop() < width:
        return MatchResult(False, f"fewer columns than the gold's {width}")
    gold_cols, pred_cols = _columns(gold), _columns(pred)
    for j in rates:
        gold_cols[j].rate = True
    plausible = [[p for p, pc in enumerate(pred_cols) if _plausible(gc, pc, rel_tol)] for gc in gold_cols]
    candidates = [
        c if len(c) < 2 else [p for p in c if _compatible(gold_cols[j], pred_cols[p], rel_tol)]
        for j, c in enumerate(plausible)
    ]
    if pinned:  # a prediction column named like a gold column claims that meaning: it must be that column
        candidates = [[p for p in c if pinned.get(j, p) == p] for j, c in enumerate(candidates)]

    def search(segments: list[int] | None) -> str:
        def rows_ok(chosen: dict[int, int]) -> bool:
            return _rows_equal([(gold_cols[g], pred_cols[p]) for g, p in chosen.items()], segments, rel_tol)

        return _find_assignment(candidates, pred_cols, rows_ok)

    segments = _segments(gold_cols, len(gold), order_matters, order_keys, groups)
    missing = [j + 1 for j, c in enumerate(candidates) if not c]
    reason = "" if missing else search(segments)
    if reason.startswith("rows differ"):  # a lone candidate was only plausible: name the column it fails
        missing = [j + 1 for j, c in enumerate(candidates) if not _compatible(gold_cols[j], pred_cols[c[0]], rel_tol)]
        if not missing and segments and not search(None):
            reason = "same rows, but not in the gold's order"
    if missing:
        reason = f"no prediction column has the values of gold column(s) {missing}"
    return MatchResult(not reason, reason or "match")


def match(pred: Sequence[Row] | None, gold: Sequence[Row], **options: Any) -> bool:
    """explain(...).ok"""
    return explain(pred, gold, **options).ok
