"""`evalpkg sync`: bootstrap, dbt build, Great Expectations; clear errors for every precondition."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from evalpkg.db import connect
from evalpkg.errors import ConfigError
from evalpkg.expectations import ValidationReport
from evalpkg.services.postgres import Progress, ensure_databases
from evalpkg.settings import EVAL_DB, Settings
from evalpkg.sync import bootstrap
from evalpkg.sync.dbt import NodeResult, run_dbt
from evalpkg.sync.validate import validate_eval_db

EVAL_TABLES = ("t_patient_info", "t_zy_visit", "t_diag_record", "t_lab_result", "t_med_order")


@dataclass
class SyncReport:
    rows: dict[str, int] = field(default_factory=dict)
    snapshot_version: str = ""
    nodes: list[NodeResult] = field(default_factory=list)
    validation: ValidationReport | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        total = sum(self.rows.values())
        checks = self.validation.summary() if self.validation else "not validated"
        timing = ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())
        return (
            f"synced {total:,} rows into {EVAL_DB} (snapshot {self.snapshot_version}); "
            f"dbt {len(self.nodes)} nodes ok; {checks}; {timing}"
        )


def prepare(settings: Settings) -> None:
    """Everything dbt needs: roles, grants, the foreign link; fails before dbt on a missing key."""
    ensure_databases(settings)
    bootstrap.ensure_roles(settings)
    bootstrap.ensure_eval_db(settings)
    bootstrap.grant_prod_reader(settings)
    if not bootstrap.has_key(settings):
        raise ConfigError(
            f"no de-identification key in {EVAL_DB}.{bootstrap.KEY_SCHEMA}.{bootstrap.KEY_TABLE}: "
            "run `evalpkg deid set-key` (or `evalpkg up` for the embedded cluster)"
        )
    bootstrap.ensure_foreign_server(settings)


def run_sync(
    settings: Settings,
    *,
    full_refresh: bool = False,
    validate: bool = True,
    progress: Progress = lambda _: None,
) -> SyncReport:
    report = SyncReport()
    t0 = time.perf_counter()
    prepare(settings)
    report.seconds["prepare"] = time.perf_counter() - t0
    progress("running dbt build (staging -> marts, data and unit tests)")
    t1 = time.perf_counter()
    report.nodes = run_dbt(settings, "build", *(["--full-refresh"] if full_refresh else []))
    report.seconds["dbt"] = time.perf_counter() - t1
    with connect(settings.db_url(EVAL_DB)) as conn:
        # Fresh planner statistics for agents' queries and the catalog tools (pg_stats).
        for schema, table in conn.execute(
            "select table_schema, table_name from information_schema.tables "
            "where table_schema in ('emr', 'meta', 'ops') and table_type = 'BASE TABLE'"
        ).fetchall():
            conn.execute(f'analyze "{schema}"."{table}"')
        for table in EVAL_TABLES:
            row = conn.execute(f"select count(*) from emr.{table}").fetchone()
            report.rows[table] = int(row[0]) if row else 0
        snap = conn.execute("select snapshot_version from meta.snapshot").fetchone()
        report.snapshot_version = str(snap[0]) if snap else ""
    if validate:
        progress("validating the eval DB with Great Expectations")
        t2 = time.perf_counter()
        report.validation = validate_eval_db(settings)
        report.seconds["gx"] = time.perf_counter() - t2
    return report
