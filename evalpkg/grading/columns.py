"""The column model: a column's values, kind (integers, fractions where tolerance applies, other) and the
views a grader takes of it (a rate in the gold's scale, month numbers as labels, a gold read at a coarser
prediction's decimals); and when a prediction column may stand for a gold column."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from evalpkg.grading.labels import label_key
from evalpkg.grading.periods import period_ids
from evalpkg.grading.values import (
    MAX_DECIMALS,
    UNROUNDED,
    Floats,
    Marker,
    Row,
    count_in,
    decimals_of,
    floats_of,
    half_away,
    text_tokens,
    token,
    without_noise,
)

PERIODS_IN_YEAR = {"month": 12, "quarter": 4}


@dataclass
class Column:
    tokens: list[Any]
    kind: str  # "int", "float" (where tolerance applies) or "other"
    numbers: Floats | None = None  # numeric kinds: the values as floats, 0.0 at NULL, NaN and infinities
    text_length: int | None = None
    has_markers: bool = True
    rate: bool = False  # a gold rate: a prediction may give it as a fraction or as a percentage
    stated: int | None = None  # the decimals the query wrote its values with (a numeric's scale), where known
    rounded_to: int | None = None  # a gold's: the decimals its own SQL rounded to (round(avg(x), 1)), where known
    coarser: dict[tuple[int, int], Column] = field(default_factory=dict, repr=False, compare=False)  # rounded()
    rescaled: dict[int, Column] = field(default_factory=dict, repr=False, compare=False)  # as_rate_of()
    snapped: dict[tuple[int, int], Column] = field(default_factory=dict, repr=False, compare=False)  # rounding_to()
    units: dict[int, Floats] = field(default_factory=dict, repr=False, compare=False)  # sorted_units()

    @classmethod
    def of(cls, values: list[Any]) -> Column:
        types = set(map(type, values))
        if types <= {int, float}:  # the common cases first, each in one pass over the values
            numbers = floats_of(values)
            if numbers is not None and np.isfinite(numbers).all():
                if float not in types:
                    return cls(values, "int", numbers, has_markers=False)
                numbers, tokens = without_noise(numbers, values)
                return cls(tokens, "float", numbers, has_markers=False)
        if types == {str}:
            tokens, length = text_tokens(values)
            return cls(tokens, "other", text_length=length)
        tokens = list(map(token, values))
        kinds = {type(t) for t in tokens} - {Marker}
        if not kinds or not kinds <= {int, float}:
            return cls(tokens, "other")
        numbers = floats_of([0.0 if type(t) is Marker else t for t in tokens])
        if float not in kinds or numbers is None:
            return cls(tokens, "int", numbers)
        numbers, cleaned = without_noise(numbers, tokens)
        tokens = [t if type(t) is Marker else v for t, v in zip(tokens, cleaned, strict=True)]
        return cls(tokens, "float", numbers)

    @cached_property
    def decimals(self) -> int:
        """The fewest decimals that write every value (the executor hands numerics over as floats, so a
        rounded 2.50 reads as 2.5). A sample first: most computed float columns are UNROUNDED."""
        if self.numbers is None:
            return 0
        if self.stated is not None:
            return self.stated if self.stated <= MAX_DECIMALS else UNROUNDED
        sample = decimals_of(self.numbers[:64])
        return sample if sample == UNROUNDED else decimals_of(self.numbers, sample)

    def rounded(self, decimals: int, like: Column) -> Column:
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

    def _rounded(self, decimals: int, like: Column) -> tuple[Column, bool]:
        assert self.numbers is not None
        whole, half = half_away(self.numbers, decimals)
        sign = np.sign(self.numbers)
        on_halves = bool(half.any())
        if like.numbers is not None and on_halves:
            ties = np.flatnonzero(half)
            away = sign[ties] * whole[ties]
            candidates = np.unique(np.concatenate([away, away - sign[ties]]))
            theirs = count_in(like.sorted_units(decimals), candidates)
            mine = count_in(np.sort((sign * whole)[~half]), candidates)
            left = Counter(dict(zip(candidates.tolist(), (theirs - mine).tolist(), strict=True)))
            for i in ties:
                away, toward = sign[i] * whole[i], sign[i] * (whole[i] - 1)
                if left[away] <= 0 < left[toward]:
                    whole[i] -= 1
                left[sign[i] * whole[i]] -= 1
        numbers = sign * whole / 10.0**decimals
        tokens = numbers.tolist()
        if self.has_markers:
            tokens = [t if type(t) is Marker else v for t, v in zip(self.tokens, tokens, strict=True)]
        return Column(tokens, "float", numbers, has_markers=self.has_markers), on_halves

    def rounding_to(self, decimals: int, gold: Column) -> Column:
        """A finer prediction read at the decimals a gold's SQL rounded to: each value that rounds to one of the
        gold's values at those decimals is that value (8.58 is 8.6 where the gold wrote round(x, 1)); a value
        that rounds to none stays as it is, for the tolerance to decide. Remembered per (decimals, gold)."""
        key = (decimals, id(gold))
        if key not in self.snapped:
            assert self.numbers is not None
            rounded = self.rounded(decimals, like=gold)
            assert rounded.numbers is not None
            held = count_in(gold.sorted_units(decimals), np.rint(rounded.numbers * 10.0**decimals)) > 0
            if self.has_markers:
                held &= np.array([type(t) is not Marker for t in self.tokens])
            if held.all():
                self.snapped[key] = rounded
            else:
                numbers = np.where(held, rounded.numbers, self.numbers)
                tokens = [r if h else t for r, t, h in zip(rounded.tokens, self.tokens, held.tolist(), strict=True)]
                self.snapped[key] = Column(tokens, "float", numbers, has_markers=self.has_markers)
        return self.snapped[key]

    def sorted_units(self, decimals: int) -> Floats:
        """The values in units of that decimal, sorted (remembered: every finer column asks for them)."""
        assert self.numbers is not None
        if decimals not in self.units:
            self.units[decimals] = np.sort(np.rint(self.numbers * 10.0**decimals))
        return self.units[decimals]

    def as_rate_of(self, gold: Column) -> Column:
        """This column in the gold rate's scale: a percentage (12.3) of a fraction (0.123) divided by 100,
        a fraction of a percentage times 100; itself where the magnitudes say neither. Remembered per gold."""
        if id(gold) not in self.rescaled:
            self.rescaled[id(gold)] = self._as_rate_of(gold)
        return self.rescaled[id(gold)]

    def _as_rate_of(self, gold: Column) -> Column:
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
            tokens = [t if type(t) is Marker else v for t, v in zip(self.tokens, tokens, strict=True)]
        return Column(tokens, "float", numbers, has_markers=self.has_markers)

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
        if not self.has_markers or not any(type(t) is Marker for t in self.tokens):
            return None
        return [t if type(t) is Marker else None for t in self.tokens]

    @cached_property
    def periods(self) -> tuple[str, str | None, list[str]] | None:
        """(kind, year, each value's period id) where every value labels a period of one kind (a month, a
        quarter), however written ('2024-Q1', 'Q1 2024', '2024年第一季度', 'Jan 2024', '2024-01'): the ids of
        periods.period_ids; year: the one year they lie in ('*' where no label names one), None where they
        span several (NULLs: none)."""
        if self.kind != "other" or not self.tokens or not isinstance(self.tokens[0], str):
            return None
        ids = []
        for t in self.tokens:
            found = period_ids(label_key(t)) if isinstance(t, str) else set()
            if len(found) != 1:
                return None
            ids.append(found.pop())
        kinds = {i.partition(":")[0] for i in ids}
        years = {i.partition(":")[2].partition("-")[0] for i in ids}
        if len(kinds) != 1 or (len(years) > 1 and "*" in years):
            return None
        return kinds.pop(), years.pop() if len(years) == 1 else None, ids

    def numbered_periods(self, kind: str, year: str) -> Column | None:
        """Numbers of periods within the year (months 1..12, quarters 1..4) as ids of `kind` in `year`."""
        size = PERIODS_IN_YEAR[kind]
        if self.kind == "other" or not all(t in range(1, size + 1) for t in self.tokens):  # 3.0 is 3
            return None
        numbers = [int(t) for t in self.tokens]
        ids = [f"month:{year}-{n:02d}" if kind == "month" else f"quarter:{year}-Q{n}" for n in numbers]
        return Column(ids, "other")


def view(g: Column, p: Column) -> tuple[Column, Column]:
    """The pair as compared: a rate in the gold's scale; periods as their ids, however each side writes
    them (a month or quarter number is the period of that number in the one year the other side's labels
    name); a fractional gold is read at a coarser prediction's decimals."""
    if g.rate and g.numbers is not None and p.numbers is not None:
        p = p.as_rate_of(g)
    if (labelled := p.periods) and labelled[1] and (numbered := g.numbered_periods(labelled[0], labelled[1])):
        return numbered, Column(labelled[2], "other")
    if (labelled := g.periods) and labelled[1] and (numbered := p.numbered_periods(labelled[0], labelled[1])):
        return Column(labelled[2], "other"), numbered
    if g.periods and p.periods and g.periods[0] == p.periods[0]:
        return Column(g.periods[2], "other"), Column(p.periods[2], "other")
    if g.kind == p.kind == "float" and g.decimals > p.decimals:
        return at_coarser_precision(g, p)
    if g.kind == p.kind == "float" and g.rounded_to is not None and p.decimals > g.rounded_to:
        return g, p.rounding_to(g.rounded_to, g)
    return g, p


def at_coarser_precision(g: Column, p: Column) -> tuple[Column, Column]:
    """A gold finer than a prediction with decimals, rounded to those where no value rounds away to 0 (a
    grader takes 12.3 for 12.34 and 0.8% for 0.79%, but not 0.0% for 0.04%). Where the query's own decimals
    are known (round(x, 1) is stated as one decimal, round(x, 2) as two even at 0.70), the prediction is read
    at them: 0.7 for 0.74 when it rounded to one, 0.70 against 0.71 when it rounded to two. Where they are not
    known (a float: a computed 0.70 arrives as 0.7), also only where the gold's largest value keeps two
    significant figures (not 0.1 for 0.12, nor 0.7 for 0.71). A prediction finer than the gold is left to the
    task's tolerance where the gold does not say it was rounded; where its SQL did, see Column.rounding_to."""
    assert g.numbers is not None
    d = p.decimals
    units = np.abs(g.numbers) * 10.0**d
    significant = p.stated is not None or units.max() >= 10
    if 1 <= d < g.decimals and significant and ((units == 0) | (units >= 0.5)).all():
        return g.rounded(d, like=p), p
    return g, p


def tolerant(g: Column, p: Column) -> tuple[Floats, Floats] | None:
    """The pair's numbers where tolerance applies: a fractional gold column (an integer one is exact)."""
    if g.kind == "float" and g.numbers is not None and p.numbers is not None:
        return g.numbers, p.numbers
    return None


def close(a: Floats, b: Floats, rel_tol: float) -> npt.NDArray[np.bool_]:
    """math.isclose elementwise, symmetric in a and b."""
    return np.abs(a - b) <= np.maximum(rel_tol * np.maximum(np.abs(a), np.abs(b)), abs_tol(rel_tol))


def abs_tol(rel_tol: float) -> float:
    return rel_tol * 1e-3 if rel_tol else 1e-12  # near zero a relative tolerance means nothing


def same_kind(g: Column, p: Column) -> bool:
    """A gold column that holds fractions (a rate, a mean: a value that shows at two decimals) is never
    stood for by a column of whole numbers (a count): 71 patients is not 71.11%, however close. A rate
    given in the other scale (whole percentages of a fraction) is compared in the gold's."""
    if g.rate and g.numbers is not None and p.numbers is not None:
        p = p.as_rate_of(g)
    return not (p.kind == "int" and g.fractional)


def plausible(g: Column, p: Column, rel_tol: float) -> bool:
    """Cheap necessary condition for compatible: numbers against numbers with the same smallest and largest
    values, text against text of the same total length, a fraction never against whole numbers."""
    if not same_kind(g, p):
        return False
    g, p = view(g, p)
    if (g.kind == "other") != (p.kind == "other"):
        return False
    if g.span is None or p.span is None:
        return None in (g.text_length, p.text_length) or g.text_length == p.text_length
    return bool(close(g.span, p.span, rel_tol).all() if tolerant(g, p) else np.array_equal(g.span, p.span))


def compatible(g: Column, p: Column, rel_tol: float) -> bool:
    """The same bag of values (with tolerance, sorted pairing is a proper matching in one dimension)."""
    if not same_kind(g, p):
        return False
    g, p = view(g, p)
    numbers = tolerant(g, p)
    if numbers is None:
        return g.bag == p.bag
    a, b = numbers
    return Counter(g.shape or ()) == Counter(p.shape or ()) and bool(close(np.sort(a), np.sort(b), rel_tol).all())


def columns_of(rows: Sequence[Row]) -> list[Column]:
    values, width = list(chain.from_iterable(rows)), len(rows[0])  # one pass over the rows: the fastest way
    return [Column.of(values[i::width]) for i in range(width)]
