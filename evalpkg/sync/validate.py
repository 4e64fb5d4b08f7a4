"""The Great Expectations suite for the eval DB (expectations/eval_db.json), run after every sync."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from evalpkg.db import connect
from evalpkg.errors import SyncError
from evalpkg.expectations import BatchSpec, ValidationReport, load_suite, validate_sql
from evalpkg.services.bootstrap import MART_SCHEMAS
from evalpkg.settings import EVAL_DB, PROD_DB, Settings

# Checked by their own format expectations; hex digests would look like phone numbers.
PSEUDONYM_COLUMNS = ("patient_id", "visit_id")
# Each table's row-parity bounds, by the time its row happened: with the key, dbt's
# assert_row_parity_with_prod checks the exact count; without it, a row whose prod time is within the
# smallest shift (7 days) past the snapshot's "now" is surely synced, and one past the largest (364) never.
ROW_PARITY_TABLES = {
    "t_patient_info": "jdrq",
    "t_zy_visit": "ryrq",
    "t_diag_record": "zdsj",
    "t_lab_result": "exec_time",
    "t_med_order": "kssj",
}
SHIFT_DAYS_RANGE = (7, 364)
# A mart schema qualifying a name in the suite's queries ("from emr.t_lab_result"), not part of one.
QUALIFIED = re.compile(r'(?<![\w."$])(' + "|".join(MART_SCHEMAS) + r")\.(?=[a-z_\"])")


def in_schemas(query: str, suffix: str) -> str:
    """The suite's query on the build schemas (suffix "__build") rather than the published ones."""
    return QUALIFIED.sub(lambda m: f"{m[1]}{suffix}.", query) if suffix else query


def _text_values_query(settings: Settings, schemas: list[str]) -> str:
    with connect(settings.db_url(EVAL_DB)) as conn:
        cols = conn.execute(
            "select table_schema, table_name, column_name from information_schema.columns "
            "where table_schema = any(%s) and data_type in ('text', 'character varying', 'character') "
            "and column_name <> all(%s) order by 1, 2, 3",
            (schemas, list(PSEUDONYM_COLUMNS)),
        ).fetchall()
    parts = [f'select distinct "{c}"::text as value from "{s}"."{t}"' for s, t, c in cols]
    return " union ".join(parts)


def _parameters(settings: Settings, suffix: str) -> dict[str, Any]:
    params: dict[str, Any] = {}
    with connect(settings.db_url(PROD_DB)) as conn:
        for table, happened in ROW_PARITY_TABLES.items():
            row = conn.execute(
                f"select count(*) filter (where {happened} <= now + make_interval(days => %s)), "
                f"count(*) filter (where {happened} <= now + make_interval(days => %s)) "
                f"from his.{table}, (select as_of + interval '1 day' - interval '1 second' as now "
                "from meta.his_info) as snapshot where is_deleted = 0",
                SHIFT_DAYS_RANGE,
            ).fetchone()
            params[f"prod_rows_{table}_surely_synced"] = int(row[0]) if row else 0
            params[f"prod_rows_{table}_may_sync"] = int(row[1]) if row else 0
    with connect(settings.db_url(EVAL_DB)) as conn:
        snap = conn.execute(f"select extract(year from pinned_date)::int from meta{suffix}.snapshot").fetchone()
    if snap is None:
        raise SyncError(f"{EVAL_DB}.meta{suffix}.snapshot is empty: the dbt build did not finish")
    now_year = int(snap[0])
    # The age a birth year shows is now_year - csnf; one over 89 has no birth year (Safe Harbor).
    params["min_birth_year"] = now_year - 89
    params["max_birth_year"] = now_year
    return params


def validate_eval_db(settings: Settings, suite_path: Path | None = None, *, suffix: str = "") -> ValidationReport:
    """The suite on the published marts, or with ``suffix`` (dbt.BUILD_SUFFIX) on a build not yet published."""
    spec = load_suite(suite_path or settings.expectations_dir / "eval_db.json")

    def query_for(batch: BatchSpec) -> str:
        if batch.query:
            return in_schemas(batch.query, suffix)
        schemas = batch.all_text_columns or []
        return _text_values_query(settings, [s + suffix if s in MART_SCHEMAS else s for s in schemas])

    report = validate_sql(spec, settings.db_url(EVAL_DB), _parameters(settings, suffix), query_for)
    return report.raise_on_failure(SyncError)
