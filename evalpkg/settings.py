"""Settings from the environment (prefix ``EVALPKG_``); every URL may point at an existing server."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from evalpkg.dburl import redact, with_database, with_user

PROJECT_ROOT = Path(__file__).resolve().parent.parent

PROD_DB = "ehr_prod"
EVAL_DB = "ehr_eval"
RESULTS_DB = "eval_results"
# The README's world, at the reference scale: the smallest round size where a department's month holds
# signal (outpatient visits per department x month over the last 12 months: median at least 30; docs/world.md).
README_PATIENTS = 50_000

SYNC_ROLE = "evalpkg_sync"
AGENT_ROLE = "evalpkg_agent"
# Reads what agents read plus the ops schema (the ticket log, whose SQL answers the refresh's tasks):
# the ticket miner's role, never an agent's.
CURATOR_ROLE = "evalpkg_curator"
PROD_READER_ROLE = "evalpkg_prod_reader"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EVALPKG_", extra="ignore")

    state_dir: Path = Field(default=PROJECT_ROOT / ".evalpkg", description="embedded services' data")
    worlds_dir: Path | None = Field(
        default=None,
        description="where the reference worlds are built and kept; unset = <state_dir>/worlds (they depend on the "
        "code only, so several state directories may share one)",
    )
    pg_port: int = Field(default=55432, ge=1024, le=65535)
    pg_url: str | None = Field(
        default=None,
        description="admin URL of an existing PostgreSQL server; unset = the embedded cluster",
    )
    mlflow_port: int = Field(default=55000, ge=1024, le=65535)
    mlflow_uri: str | None = Field(default=None, description="existing MLflow tracking server")
    sync_password: str | None = Field(default=None, description="password of the sync role, if needed")
    agent_password: str | None = Field(default=None, description="password of the agents' role, if needed")
    curator_password: str | None = Field(default=None, description="password of the ticket miner's role, if needed")
    tasks_dir: Path = PROJECT_ROOT / "tasks"
    agent_statement_timeout_ms: int = Field(default=30_000, gt=0)
    dbt_project_dir: Path = PROJECT_ROOT / "dbt_project"
    expectations_dir: Path = PROJECT_ROOT / "expectations"

    @field_validator("pg_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("postgresql", "postgres"):
            raise ValueError(f"expected postgresql://user@host:port/database, got {redact(value)!r}")
        return value

    @property
    def embedded_pg(self) -> bool:
        return self.pg_url is None

    @property
    def embedded_mlflow(self) -> bool:
        return self.mlflow_uri is None

    @cached_property
    def admin_url(self) -> str:
        if self.pg_url is not None:
            return self.pg_url
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/postgres"

    def db_url(self, database: str) -> str:
        return with_database(self.admin_url, database)

    def agent_url(self, *, with_password: bool = True) -> str:
        """The eval DB as the agents' read-only role: what agents, golds and the scorer query."""
        return with_user(self.db_url(EVAL_DB), AGENT_ROLE, self.agent_password if with_password else None)

    def curator_url(self, *, with_password: bool = True) -> str:
        """The eval DB as the read-only role that also reads the ticket log (the refresh's miner)."""
        return with_user(self.db_url(EVAL_DB), CURATOR_ROLE, self.curator_password if with_password else None)

    @property
    def tracking_uri(self) -> str:
        return self.mlflow_uri or f"http://127.0.0.1:{self.mlflow_port}"


def get_settings() -> Settings:
    return Settings()
