"""`evalpkg up/down/status`: the embedded services as one unit."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpkg.db import can_connect
from evalpkg.net import free_port
from evalpkg.progress import Progress
from evalpkg.services import bootstrap, mlflow_server, postgres
from evalpkg.settings import Settings


@dataclass
class ServiceStatus:
    name: str
    location: str
    embedded: bool
    up: bool


def up(settings: Settings, log: Progress) -> None:
    if settings.embedded_pg:
        if postgres.init_cluster(settings):
            log(f"created PostgreSQL cluster in {postgres.paths(settings).data}")
        postgres.start(settings)
        log(f"PostgreSQL up at {settings.admin_url}")
    bootstrap.bootstrap_server(settings)
    if settings.embedded_pg and bootstrap.set_key(settings):
        log("generated a de-identification key (stored only in the eval DB's deid_secret schema)")
    if settings.embedded_mlflow:
        mlflow_server.start(settings)
        log(f"MLflow up at {settings.tracking_uri}")


@contextmanager
def scratch_cluster(**settings: Any) -> Iterator[Settings]:
    """A throwaway PostgreSQL cluster (its own state directory and free ports) with the databases,
    roles and a random de-identification key; stopped and removed afterwards. For worlds that must
    not touch the user's own cluster (tests, reference worlds)."""
    state = Path(tempfile.mkdtemp(prefix="evalpkg-scratch-"))
    state.chmod(0o755)  # the 'postgres' user must reach it when this runs as root
    s = Settings(state_dir=state, pg_port=free_port(), mlflow_port=free_port(), **settings)
    postgres.init_cluster(s)
    postgres.start(s)
    try:
        bootstrap.bootstrap_server(s)
        bootstrap.set_key(s)
        yield s
    finally:
        postgres.stop(s)
        shutil.rmtree(state, ignore_errors=True)


def down(settings: Settings, log: Progress) -> None:
    if settings.embedded_mlflow and mlflow_server.stop(settings):
        log("MLflow stopped")
    if settings.embedded_pg and postgres.stop(settings):
        log("PostgreSQL stopped")


def status(settings: Settings) -> list[ServiceStatus]:
    return [
        ServiceStatus("postgresql", settings.admin_url, settings.embedded_pg, can_connect(settings.admin_url)),
        ServiceStatus(
            "mlflow",
            settings.tracking_uri,
            settings.embedded_mlflow,
            mlflow_server.is_healthy(settings.tracking_uri),
        ),
    ]
