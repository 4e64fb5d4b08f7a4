"""`evalpkg sync`: bootstrap, dbt build, Great Expectations, publish; clear errors for every precondition.

dbt builds the marts into build schemas and the suite checks them there; only then are they published
in one transaction (evalpkg.sync.publish). Until that moment agents query the previous snapshot, and a
failure or Ctrl-C anywhere before it leaves that snapshot as it was."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from evalpkg.db import connect
from evalpkg.errors import ConfigError
from evalpkg.expectations import ValidationReport
from evalpkg.interrupts import held_interrupts
from evalpkg.progress import Progress, quiet
from evalpkg.services import bootstrap
from evalpkg.settings import EVAL_DB, Settings
from evalpkg.sync import publish
from evalpkg.sync.dbt import BUILD_SUFFIX, NodeResult, incremental_models, parse, run_dbt
from evalpkg.sync.publish import PUBLISHED
from evalpkg.sync.validate import validate_eval_db

EVAL_TABLES = ("t_patient_info", "t_zy_visit", "t_diag_record", "t_lab_result", "t_med_order")
NOT_PUBLISHED = "nothing was published; the eval DB keeps its previous snapshot"


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
    bootstrap.bootstrap_server(settings)
    bootstrap.grant_prod_reader(settings)
    if not bootstrap.has_key(settings):
        raise ConfigError(
            f"no de-identification key in {EVAL_DB}.{bootstrap.KEY_SCHEMA}.{bootstrap.KEY_TABLE}: "
            "run `evalpkg deid set-key` (or `evalpkg up` for the embedded cluster)"
        )
    bootstrap.ensure_foreign_server(settings)


# The sync, in order; `run_sync` runs them in one process, the ehr_deid_sync DAG as tasks (its dbt build
# step is the Cosmos task group): 1. begin_build, 2. dbt build, 3. check_build, 4. publish_build.


def begin_build(settings: Settings, *, full_refresh: bool = False) -> Any:
    """Roles, grants and the foreign link, then fresh build schemas (incremental models seeded from the
    published snapshot); dbt's manifest."""
    prepare(settings)
    manifest = parse(settings, build=True)
    publish.reset_build(settings, incremental_models(manifest), full_refresh=full_refresh)
    return manifest


def analyze_build(settings: Settings) -> None:
    """Fresh planner statistics for agents' queries and the catalog tools (pg_stats); they are
    published with the tables."""
    with connect(settings.db_url(EVAL_DB)) as conn:
        for schema, table in publish.build_tables(conn):
            conn.execute(f'analyze "{schema}"."{table}"')


def check_build(settings: Settings) -> ValidationReport:
    """Fresh statistics, then the GX suite on the build, before anything is published."""
    analyze_build(settings)
    return validate_eval_db(settings, suffix=BUILD_SUFFIX)


def publish_build(settings: Settings) -> None:
    """The validated build becomes what agents query, in one transaction; the replaced tables go."""
    publish.publish(settings)
    publish.drop_replaced(settings)


def run_sync(
    settings: Settings,
    *,
    full_refresh: bool = False,
    validate: bool = True,
    progress: Progress = quiet,
) -> SyncReport:
    publishing = False  # from the swap on, Ctrl-C waits: the swap commits, then the interrupt is reported
    try:
        with publish.sync_lock(settings), held_interrupts(lambda: publishing, PUBLISHED) as raise_if_interrupted:
            report = _build_and_check(settings, full_refresh, validate, progress)
            raise_if_interrupted()  # a Ctrl-C whose KeyboardInterrupt a library swallowed still stops here
            publishing = True
            publish_build(settings)
    except KeyboardInterrupt as exc:
        if str(exc):
            raise
        raise KeyboardInterrupt(NOT_PUBLISHED) from None
    return report


def _build_and_check(settings: Settings, full_refresh: bool, validate: bool, progress: Progress) -> SyncReport:
    report = SyncReport()
    t0 = time.perf_counter()
    manifest = begin_build(settings, full_refresh=full_refresh)
    report.seconds["prepare"] = time.perf_counter() - t0
    progress("running dbt build (staging -> marts, data and unit tests)")
    t1 = time.perf_counter()
    extra = ["--full-refresh"] if full_refresh else []
    report.nodes = run_dbt(settings, "build", *extra, build=True, manifest=manifest)
    report.seconds["dbt"] = time.perf_counter() - t1
    with connect(settings.db_url(EVAL_DB)) as conn:
        for table in EVAL_TABLES:
            row = conn.execute(f"select count(*) from emr{BUILD_SUFFIX}.{table}").fetchone()
            report.rows[table] = int(row[0]) if row else 0
        snap = conn.execute(f"select snapshot_version from meta{BUILD_SUFFIX}.snapshot").fetchone()
        report.snapshot_version = str(snap[0]) if snap else ""
    if validate:
        progress("validating the eval DB with Great Expectations")
        t2 = time.perf_counter()
        report.validation = check_build(settings)
        report.seconds["gx"] = time.perf_counter() - t2
    else:
        analyze_build(settings)
    return report
