"""Values as a grader compares them: one canonical token per cell (NULL, booleans and non-finite floats as
markers equal only to themselves; dates as the executor writes them, a first of the month as its 'YYYY-MM'
label; text NFKC-normalised and trimmed), and the numeric helpers the column model rounds with."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from evalpkg.sql.vocabulary import FIRST_OF_MONTH

MAX_DECIMALS = 10  # a number written with more decimals was not rounded
UNROUNDED = MAX_DECIMALS + 1
NOISE = 1e-9  # absolute: what float summation leaves where the exact value is an integer
Row = Sequence[Any]
Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.intp]


class Marker:
    """NULL, booleans and non-finite floats: equal only to themselves."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NULL, FALSE, TRUE, NAN, NEG_INF, POS_INF = map(Marker, ("NULL", "false", "true", "NaN", "-inf", "inf"))
BOOL_WORDS = {"t": TRUE, "true": TRUE, "f": FALSE, "false": FALSE}
SPACE = re.compile(r"\s")
nfkc = partial(unicodedata.normalize, "NFKC")


def period_label(s: str) -> str:
    """A date or midnight on the 1st as its month's 'YYYY-MM' label."""
    m = FIRST_OF_MONTH.fullmatch(s)
    return f"{m[1]}-{m[2]}" if m else s


def text_token(s: str) -> Any:
    s = nfkc(s).strip()
    return BOOL_WORDS.get(s) or period_label(s)


def float_token(v: float) -> Any:
    return v if math.isfinite(v) else NAN if v != v else POS_INF if v > 0 else NEG_INF


def token(v: Any) -> Any:
    """One value in canonical form; dates and times written as the executor writes the agent's."""
    if v is None:
        return NULL
    if isinstance(v, bool):
        return TRUE if v else FALSE
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return float_token(v)
    if isinstance(v, decimal.Decimal):  # scale 0 (count, sums of integers, round) is an integer type
        exponent = v.as_tuple().exponent
        return int(v) if isinstance(exponent, int) and exponent >= 0 else float_token(float(v))
    if isinstance(v, str):
        return text_token(v)
    if isinstance(v, dt.datetime):
        return text_token(v.isoformat(sep=" "))
    if isinstance(v, dt.date | dt.time):
        return text_token(v.isoformat())
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes | memoryview):
        return "<binary>"
    if isinstance(v, list | tuple | dict):
        return json.dumps(v, sort_keys=True, default=str, ensure_ascii=False)
    return text_token(str(v))


def text_tokens(values: list[str]) -> tuple[list[Any], int | None]:
    """text_token over a column, looking at the joined column first so that most columns pass untouched; and the
    total length, a cheap signature (None where tokens are not plain strings)."""
    joined = "\x00".join(values)  # NUL never occurs in PostgreSQL text
    if not joined.isascii() and not unicodedata.is_normalized("NFKC", joined):
        values = list(map(nfkc, values))
        joined = "\x00".join(values)
    if SPACE.search(joined):
        values = list(map(str.strip, values))
        joined = "\x00".join(values)
    tokens: list[Any] = values
    if "-01" in joined and max(map(len, values)) >= 10 and FIRST_OF_MONTH.search(joined):
        tokens = list(map(period_label, tokens))
    if any(f"\x00{word}\x00" in f"\x00{joined}\x00" for word in BOOL_WORDS):
        tokens = list(map(BOOL_WORDS.get, tokens, tokens))
    return tokens, len(joined) if tokens is values else None


def floats_of(values: Sequence[Any]) -> Floats | None:
    try:
        return np.array(values, dtype=np.float64)
    except OverflowError:  # an integer beyond float range: its column compares exactly
        return None


def without_noise(numbers: Floats, values: list[Any]) -> tuple[Floats, list[Any]]:
    """A float within summation noise of an integer is that integer (1e-13 is 0, 2.9999999999999996 is 3);
    NOISE is far below any tolerance, so 2.9999999 stays a near miss of an integer gold."""
    nearest = np.rint(numbers)
    noisy = (numbers != nearest) & (np.abs(numbers - nearest) <= np.maximum(NOISE, NOISE * 1e-3 * np.abs(numbers)))
    if not noisy.any():
        return numbers, values
    numbers = np.where(noisy, nearest, numbers)
    return numbers, numbers.tolist()


def count_in(sorted_values: Floats, values: Floats) -> Ints:
    """How often each of `values` occurs in `sorted_values`."""
    return np.searchsorted(sorted_values, values, "right") - np.searchsorted(sorted_values, values, "left")


def decimals_of(x: Floats, start: int = 0) -> int:
    """The fewest decimals that write every value exactly, UNROUNDED beyond MAX_DECIMALS."""
    for d in range(start, MAX_DECIMALS + 1):
        if (np.round(x, d) == x).all():
            return d
    return UNROUNDED


def half_away(x: Floats, decimals: int) -> tuple[Floats, npt.NDArray[np.bool_]]:
    """|x| in units of the last decimal, rounded half away from zero as PostgreSQL rounds numeric, and where
    |x| lay on a half."""
    units = np.abs(x) * 10.0**decimals
    eps = 1e-9 * np.maximum(1.0, units)
    return np.floor(units + 0.5 + eps), np.abs(units - np.floor(units) - 0.5) <= eps
