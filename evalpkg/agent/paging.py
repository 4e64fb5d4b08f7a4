"""What execute_sql and fetch_page show of a result: pages of 200 rows, the true total where it is
known, and a per-column summary when the result does not fit on one page."""

from __future__ import annotations

import json
from typing import Any

from evalpkg.sql.executor import QueryResult

PAGE_ROWS = 200


def page(result: QueryResult, result_id: str, number: int) -> dict[str, Any]:
    start = number * PAGE_ROWS
    rows = result.rows[start : start + PAGE_ROWS]
    total = total_rows(result)
    out: dict[str, Any] = {
        "result_id": result_id,
        "columns": result.columns,
        "rows": rows,
        "total_rows": total,
        "status": "success_empty" if result.total_rows == 0 else "success",
    }
    if result.total_rows > PAGE_ROWS:
        out.update(
            page=number,
            pages=(min(len(result.rows), result.total_rows) - 1) // PAGE_ROWS + 1,
            column_summary=summary(result),
            note=f"showing rows {start + 1}-{start + len(rows)} of {total}; use fetch_page"
            + (f"; only the first {len(result.rows)} rows can be paged, narrow the query" if result.capped else ""),
        )
    return out


def last_page(result: QueryResult) -> int:
    return max(len(result.rows) - 1, 0) // PAGE_ROWS


def total_rows(result: QueryResult) -> int | str:
    """The true row count, or what is known of it when counting past the cap was not cheap."""
    return result.total_rows if result.total_known else f"more than {len(result.rows)}"


def summary(result: QueryResult) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, col in enumerate(result.columns):
        values = [r[i] for r in result.rows]
        nums = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        entry: dict[str, Any] = {
            "nulls": sum(v is None for v in values),
            "distinct": len({json.dumps(v, default=str) for v in values}),
        }
        if nums:
            entry.update(min=min(nums), max=max(nums), mean=round(sum(nums) / len(nums), 4))
        out[col] = entry
    return out
