"""Running helper commands, optionally as the ``postgres`` user when we are root."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from evalpkg.errors import ServiceError

SERVICE_USER = "postgres"


def running_as_root() -> bool:
    return os.geteuid() == 0


def as_service_user(cmd: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: drop to the postgres user."""
    if not running_as_root():
        return cmd
    if shutil.which("runuser") is None:
        raise ServiceError("running as root needs `runuser` to start PostgreSQL as 'postgres'")
    return ["runuser", "-u", SERVICE_USER, "--", *cmd]


def chown_to_service_user(path: Path) -> None:
    if not running_as_root():
        return
    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError as exc:
        raise ServiceError("running as root needs a 'postgres' OS user to own the cluster") from exc
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)
    os.chown(path, entry.pw_uid, entry.pw_gid)


def run(cmd: list[str], *, what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise ServiceError(f"{what} failed: {detail[-1] if detail else proc.returncode}")
    return proc.stdout
