"""Great Expectations 1.x suites (stored as JSON in expectations/) run against the eval DB."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from evalpkg.db import connect
from evalpkg.errors import ConfigError, SyncError
from evalpkg.settings import EVAL_DB, PROD_DB, Settings

SUITE_FORMAT_VERSION = 1
# Checked by their own format expectations; hex digests would look like phone numbers.
PSEUDONYM_COLUMNS = ("patient_id", "visit_id")
ROW_PARITY_TABLES = ("t_patient_info", "t_zy_visit", "t_diag_record", "t_lab_result", "t_med_order")


class ExpectationSpec(BaseModel):  # type: ignore[no-redef]
    type: str
    # "kwargs" is GX's own key in suite JSON; the pydantic mypy plugin clashes with **kwargs.
    arguments: dict[str, Any] = Field(alias="kwargs")


class BatchSpec(BaseModel):
    name: str
    query: str | None = None
    all_text_columns: list[str] | None = None  # schemas whose text values are checked together
    expectations: list[ExpectationSpec]


class SuiteFile(BaseModel):
    format_version: int
    name: str
    description: str = ""
    batches: list[BatchSpec]


@dataclass
class Failure:
    batch: str
    expectation: str
    column: str | None
    observed: Any


@dataclass
class ValidationReport:
    suite: str
    evaluated: int = 0
    failures: list[Failure] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        return f"GX suite {self.suite}: {self.evaluated - len(self.failures)}/{self.evaluated} expectations passed"


def load_suite(path: Path) -> SuiteFile:
    try:
        suite = SuiteFile.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: expectation suite not found") from exc
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{path}: field {loc}: {err['msg']}") from exc
    if suite.format_version != SUITE_FORMAT_VERSION:
        raise ConfigError(f"{path}: format_version {suite.format_version} is not {SUITE_FORMAT_VERSION}")
    return suite


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


def _parameters(settings: Settings) -> dict[str, Any]:
    params: dict[str, Any] = {}
    with connect(settings.db_url(PROD_DB)) as conn:
        for table in ROW_PARITY_TABLES:
            row = conn.execute(f"select count(*) from his.{table} where is_deleted = 0").fetchone()
            params[f"prod_rows_{table}"] = int(row[0]) if row else 0
    with connect(settings.db_url(EVAL_DB)) as conn:
        snap = conn.execute("select extract(year from pinned_date)::int from meta.snapshot").fetchone()
    if snap is None:
        raise SyncError(f"{EVAL_DB}.meta.snapshot is empty: the dbt build did not finish")
    now_year = int(snap[0])
    # Ages over 89 have no birth year; shifting back up to 364 days can reach one more year.
    params["min_birth_year"] = now_year - 91
    params["max_birth_year"] = now_year
    return params


def run_suite(settings: Settings, suite_path: Path, url: str, params: dict[str, Any]) -> ValidationReport:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    spec = load_suite(suite_path)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_postgres(
        name="db", connection_string=url.replace("postgresql://", "postgresql+psycopg://", 1)
    )
    report = ValidationReport(spec.name)
    for batch in spec.batches:
        query = batch.query or _text_values_query(settings, batch.all_text_columns or [])
        asset = source.add_query_asset(name=batch.name, query=query)
        suite = gx.ExpectationSuite(name=f"{spec.name}.{batch.name}")
        for exp in batch.expectations:
            suite.add_expectation_configuration(ExpectationConfiguration(type=exp.type, kwargs=exp.arguments))
        definition = gx.ValidationDefinition(
            name=batch.name,
            data=asset.add_batch_definition_whole_table("all"),
            suite=context.suites.add(suite),
        )
        result = definition.run(expectation_parameters=params, result_format="SUMMARY")
        for r in result.results:
            report.evaluated += 1
            if not r.success:
                config = r.expectation_config
                observed = r.result.get("observed_value", r.result.get("partial_unexpected_list"))
                column = config.kwargs.get("column") if config else None
                report.failures.append(Failure(batch.name, config.type if config else "?", column, observed))
    return report


def validate_eval_db(settings: Settings, suite_path: Path | None = None) -> ValidationReport:
    path = suite_path or settings.expectations_dir / "eval_db.json"
    report = run_suite(settings, path, settings.db_url(EVAL_DB), _parameters(settings))
    if not report.success:
        f = report.failures[0]
        raise SyncError(
            f"{report.summary()}; first failure: {f.batch}: {f.expectation}"
            f"{f'({f.column})' if f.column else ''} observed {json.dumps(f.observed, default=str)[:200]}"
        )
    return report
