"""Great Expectations 1.x suites stored as JSON in expectations/, run on SQL queries or data frames."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError

from evalpkg.errors import ConfigError, EvalpkgError

if TYPE_CHECKING:
    import pandas as pd

SUITE_FORMAT_VERSION = 1

# Importing great_expectations logs ~200 INFO lines (its docs decorators, metric registry); under
# Airflow's logging they land in every task log. This module is where GX is imported, always after
# this line, so its loggers are quieted first.
logging.getLogger("great_expectations").setLevel(logging.ERROR)


class ExpectationSpec(BaseModel):  # type: ignore[no-redef]
    type: str
    # "kwargs" is GX's own key in suite JSON; the pydantic mypy plugin clashes with **kwargs.
    arguments: dict[str, Any] = Field(alias="kwargs")


class BatchSpec(BaseModel):
    name: str
    query: str | None = None  # SQL batches
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

    def raise_on_failure(self, error: type[EvalpkgError]) -> ValidationReport:
        if self.failures:
            f = self.failures[0]
            raise error(
                f"{self.summary()}; first failure: {f.batch}: {f.expectation}"
                f"{f'({f.column})' if f.column else ''} observed {json.dumps(f.observed, default=str)[:200]}"
            )
        return self


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


def _context() -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    # the one GX logger that sets itself to INFO on import ("Created temporary directory ...")
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.ERROR)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def _validate(
    context: Any, spec: SuiteFile, batch: BatchSpec, definition: Any, report: ValidationReport, **run_kwargs: Any
) -> None:
    import great_expectations as gx
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    suite = gx.ExpectationSuite(name=f"{spec.name}.{batch.name}")
    for e in batch.expectations:
        suite.add_expectation_configuration(ExpectationConfiguration(type=e.type, kwargs=e.arguments))
    validation = gx.ValidationDefinition(name=batch.name, data=definition, suite=context.suites.add(suite))
    result = validation.run(result_format="SUMMARY", **run_kwargs)
    for r in result.results:
        report.evaluated += 1
        if not r.success:
            config = r.expectation_config
            observed = r.result.get("observed_value", r.result.get("partial_unexpected_list"))
            column = config.kwargs.get("column") if config else None
            report.failures.append(Failure(batch.name, config.type if config else "?", column, observed))


def validate_sql(
    spec: SuiteFile, url: str, params: dict[str, Any], query_for: Callable[[BatchSpec], str]
) -> ValidationReport:
    """Each batch is a SQL query on a PostgreSQL database."""
    context = _context()
    source = context.data_sources.add_postgres(
        name="db", connection_string=url.replace("postgresql://", "postgresql+psycopg://", 1)
    )
    report = ValidationReport(spec.name)
    for batch in spec.batches:
        asset = source.add_query_asset(name=batch.name, query=query_for(batch))
        _validate(
            context, spec, batch, asset.add_batch_definition_whole_table("all"), report, expectation_parameters=params
        )
    return report


def validate_frames(
    spec: SuiteFile, frames: dict[str, pd.DataFrame], params: dict[str, Any] | None = None
) -> ValidationReport:
    """Each batch is a pandas data frame, looked up by the batch's name."""
    context = _context()
    source = context.data_sources.add_pandas(name="frames")
    report = ValidationReport(spec.name)
    for batch in spec.batches:
        if batch.name not in frames:
            raise ConfigError(f"suite {spec.name}: no data for batch {batch.name!r}")
        asset = source.add_dataframe_asset(name=batch.name)
        _validate(
            context,
            spec,
            batch,
            asset.add_batch_definition_whole_dataframe("all"),
            report,
            batch_parameters={"dataframe": frames[batch.name]},
            expectation_parameters=params or {},
        )
    return report
