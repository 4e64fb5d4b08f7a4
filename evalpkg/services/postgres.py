"""The embedded PostgreSQL cluster: system binaries, data under the project state directory."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from evalpkg.db import can_connect, connect
from evalpkg.errors import ServiceError
from evalpkg.services.process import as_service_user, chown_to_service_user, run
from evalpkg.settings import EVAL_DB, PROD_DB, PROD_READER_ROLE, RESULTS_DB, Settings

# Throwaway local cluster: trade durability for load speed (data is regenerable).
CLUSTER_CONF = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{socket_dir}'
shared_buffers = '256MB'
work_mem = '64MB'
maintenance_work_mem = '256MB'
synchronous_commit = off
wal_level = minimal
max_wal_senders = 0
max_wal_size = '4GB'
checkpoint_timeout = '30min'
max_parallel_workers_per_gather = 2
jit = off
"""

# postgres_fdw needs a password for a non-superuser's mapping, so the prod reader logs in by
# scram-sha-256; everything else on loopback is trusted (single-user development cluster).
HBA = f"""
local   all  all                          trust
host    all  {PROD_READER_ROLE}  127.0.0.1/32  scram-sha-256
host    all  all  127.0.0.1/32            trust
host    all  all  ::1/128                 trust
"""


@dataclass(frozen=True)
class ClusterPaths:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "run"

    @property
    def log(self) -> Path:
        return self.root / "postgresql.log"


def bin_dir() -> Path:
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidate = Path(out.stdout.strip())
        if (candidate / "initdb").exists():
            return candidate
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise ServiceError("PostgreSQL server binaries not found (need initdb and pg_ctl on PATH)")


def paths(settings: Settings) -> ClusterPaths:
    return ClusterPaths(settings.state_dir / "pg")


def _check_traversable(path: Path) -> None:
    """The postgres user must reach the data dir through every parent directory."""
    if os.geteuid() != 0:
        return
    for parent in [path, *path.parents]:
        if parent.exists() and not os.stat(parent).st_mode & 0o001:
            raise ServiceError(
                f"state dir {path} is not reachable by the 'postgres' user ({parent} is not "
                "world-executable); set EVALPKG_STATE_DIR to a path under e.g. /var/tmp"
            )


def init_cluster(settings: Settings) -> bool:
    """Create the cluster once; returns True if it was created now."""
    p = paths(settings)
    if (p.data / "PG_VERSION").exists():
        return False
    _check_traversable(settings.state_dir)
    p.data.mkdir(parents=True, exist_ok=True)
    p.socket_dir.mkdir(parents=True, exist_ok=True)
    chown_to_service_user(p.root)
    run(
        as_service_user(
            [
                str(bin_dir() / "initdb"),
                "-D",
                str(p.data),
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-locale",
                "--auth=trust",
            ]
        ),
        what="initdb",
    )
    with (p.data / "postgresql.conf").open("a") as conf:
        conf.write(CLUSTER_CONF.format(port=settings.pg_port, socket_dir=p.socket_dir))
    (p.data / "pg_hba.conf").write_text(HBA)
    chown_to_service_user(p.root)
    return True


def is_running(settings: Settings) -> bool:
    return can_connect(settings.admin_url)


def start(settings: Settings) -> None:
    p = paths(settings)
    if is_running(settings):
        return
    run(
        as_service_user(
            [
                str(bin_dir() / "pg_ctl"),
                "-D",
                str(p.data),
                "-l",
                str(p.log),
                "-o",
                f"-p {settings.pg_port}",  # the port of this start (a kept cluster gets a free one each time)
                "-w",
                "-t",
                "60",
                "start",
            ]
        ),
        what=f"starting PostgreSQL (log: {p.log})",
    )
    if not is_running(settings):
        raise ServiceError(f"PostgreSQL started but {settings.admin_url} refuses connections")


def stop(settings: Settings) -> bool:
    p = paths(settings)
    if not (p.data / "postmaster.pid").exists():
        return False
    run(
        as_service_user([str(bin_dir() / "pg_ctl"), "-D", str(p.data), "-m", "fast", "-w", "stop"]),
        what="stopping PostgreSQL",
    )
    return True


def ensure_databases(settings: Settings) -> None:
    with connect(settings.admin_url) as conn:
        existing = {r[0] for r in conn.execute("select datname from pg_database").fetchall()}
        for name in (PROD_DB, EVAL_DB, RESULTS_DB):
            if name not in existing:
                conn.execute(f'create database "{name}"')
