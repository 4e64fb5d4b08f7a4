"""Column-wise bulk loading through COPY (text format), built with vectorised numpy formatting."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import psycopg

NULL = "\\N"
Column = np.ndarray | Sequence[str | None]


def fmt_time(values: np.ndarray) -> np.ndarray:
    """datetime64 -> 'YYYY-MM-DDTHH:MM:SS'; NaT -> NULL."""
    out = np.datetime_as_string(values.astype("datetime64[s]"), unit="s")
    out[np.isnat(values)] = NULL
    return out


def fmt_date(values: np.ndarray) -> np.ndarray:
    return np.datetime_as_string(values.astype("datetime64[D]"), unit="D")


def fmt_num(values: np.ndarray, digits: int | np.ndarray = 2) -> np.ndarray:
    """Fixed-point text; NaN -> NULL. ``digits`` may vary per row."""
    values = np.asarray(values, dtype=float)
    out = np.empty(values.shape, dtype=object)
    nan = np.isnan(values)
    per_row = np.broadcast_to(np.asarray(digits), values.shape)
    for d in np.unique(per_row):
        sel = (per_row == d) & ~nan
        out[sel] = np.char.mod(f"%.{int(d)}f", values[sel])
    out[nan] = NULL
    return out


def fmt_int(values: np.ndarray) -> np.ndarray:
    return np.asarray(values).astype(np.int64).astype(str)


def fmt_text(values: Column) -> list[str]:
    return [NULL if v is None else str(v) for v in values]


def copy_columns(conn: psycopg.Connection, table: str, columns: dict[str, Column], chunk_rows: int = 200_000) -> int:
    """COPY the given text columns (all the same length) into ``table``; returns rows loaded."""
    names = list(columns)
    cols = [list(c) if not isinstance(c, list) else c for c in columns.values()]
    total = len(cols[0]) if cols else 0
    with conn.cursor() as cur, cur.copy(f"copy {table} ({', '.join(names)}) from stdin") as cp:
        for start in range(0, total, chunk_rows):
            stop = min(start + chunk_rows, total)
            rows = zip(*(c[start:stop] for c in cols), strict=True)
            cp.write("\n".join(map("\t".join, rows)) + "\n")
    return total
