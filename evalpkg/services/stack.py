"""`evalpkg up/down/status`: the embedded services as one unit."""

from __future__ import annotations

from dataclasses import dataclass

from evalpkg.db import can_connect
from evalpkg.progress import Progress
from evalpkg.services import mlflow_server, postgres
from evalpkg.settings import Settings
from evalpkg.sync import bootstrap


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
