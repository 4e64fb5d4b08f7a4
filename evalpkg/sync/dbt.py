"""Running the dbt project in-process (dbtRunner) as the non-superuser sync role."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from evalpkg.dburl import parts
from evalpkg.errors import SyncError
from evalpkg.settings import EVAL_DB, SYNC_ROLE, Settings


@dataclass
class NodeResult:
    name: str
    kind: str
    status: str
    seconds: float
    message: str


def profile_env(settings: Settings) -> dict[str, str]:
    """Environment the dbt profile reads (dbt_project/profiles.yml): the sync role, never the key."""
    target = parts(settings.db_url(EVAL_DB))
    return {
        "EVALPKG_DBT_HOST": str(target["host"] or "127.0.0.1"),
        "EVALPKG_DBT_PORT": str(target["port"]),
        "EVALPKG_DBT_USER": SYNC_ROLE,
        "EVALPKG_DBT_PASSWORD": settings.sync_password or "",
        "EVALPKG_DBT_DBNAME": EVAL_DB,
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
    }


@contextmanager
def _profile_env(settings: Settings) -> Iterator[None]:
    env = profile_env(settings)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def dbt_args(settings: Settings, command: str, *extra: str) -> list[str]:
    project = str(settings.dbt_project_dir)
    # "source freshness" is a sub-command: its options go after both words
    return [*command.split(), "--project-dir", project, "--profiles-dir", project, *extra]


def run_dbt(settings: Settings, command: str, *extra: str) -> list[NodeResult]:
    """Invoke dbt; raise SyncError naming the first failing node."""
    from dbt.cli.main import dbtRunner

    with _profile_env(settings):
        res = dbtRunner().invoke(dbt_args(settings, command, *extra))
    results: list[NodeResult] = []
    raw = getattr(res.result, "results", None) or []
    for r in raw:
        node = r.node
        results.append(
            NodeResult(
                node.name,
                str(node.resource_type),
                str(r.status),
                float(r.execution_time or 0),
                (r.message or "").strip(),
            )
        )
    failed = [r for r in results if r.status in ("error", "fail", "runtime error")]
    if failed:
        first = failed[0]
        raise SyncError(
            f"dbt {command}: {len(failed)} node(s) failed; first: {first.kind} {first.name}: "
            f"{first.message.splitlines()[0] if first.message else first.status}"
        )
    if not res.success:
        detail = str(res.exception).strip().splitlines()[0] if res.exception else "see dbt output"
        raise SyncError(f"dbt {command} failed: {detail}")
    return results
