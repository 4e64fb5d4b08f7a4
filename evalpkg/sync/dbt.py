"""Running the dbt project in-process (dbtRunner) as the non-superuser sync role."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpkg.dburl import parts
from evalpkg.errors import SyncError
from evalpkg.settings import EVAL_DB, SYNC_ROLE, Settings

# Marts (models under models/marts/) build into <schema> + this; `evalpkg sync` then swaps them in.
BUILD_SUFFIX = "__build"


@dataclass
class NodeResult:
    name: str
    kind: str
    status: str
    seconds: float
    message: str


def profile_env(settings: Settings, *, build: bool = False) -> dict[str, str]:
    """Environment the dbt profile reads (dbt_project/profiles.yml): the sync role, never the key.
    ``build``: marts go to the build schemas (emr__build, ...), not the ones agents query."""
    target = parts(settings.db_url(EVAL_DB))
    return {
        "EVALPKG_DBT_BUILD_SUFFIX": BUILD_SUFFIX if build else "",
        "EVALPKG_DBT_HOST": str(target["host"] or "127.0.0.1"),
        "EVALPKG_DBT_PORT": str(target["port"]),
        "EVALPKG_DBT_USER": SYNC_ROLE,
        "EVALPKG_DBT_PASSWORD": settings.sync_password or "",
        "EVALPKG_DBT_DBNAME": EVAL_DB,
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
    }


@contextmanager
def _profile_env(settings: Settings, build: bool) -> Iterator[None]:
    env = profile_env(settings, build=build)
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


def target_dir(settings: Settings) -> Path:
    """dbt's artifacts (manifest, run results, compiled SQL, partial_parse.msgpack): under the state
    directory, never in the checkout (a read-only DAG bundle forbids writing there)."""
    return settings.state_dir / "dbt" / "target"


def log_dir(settings: Settings) -> Path:
    """dbt.log: under the state directory, like target_dir."""
    return settings.state_dir / "dbt" / "logs"


def dbt_args(settings: Settings, command: str, *extra: str) -> list[str]:
    project = str(settings.dbt_project_dir)
    # "source freshness" is a sub-command: its options go after both words. Every command evalpkg
    # runs (parse, build, test, source freshness) takes --target-path and --log-path. dbt's own lines
    # (hundreds per build) go to dbt.log only; the terminal gets evalpkg's progress, and dbt's errors.
    return [
        *command.split(),
        "--log-level",
        "error",
        "--log-level-file",
        "debug",
        "--no-use-colors",
        "--project-dir",
        project,
        "--profiles-dir",
        project,
        "--target-path",
        str(target_dir(settings)),
        "--log-path",
        str(log_dir(settings)),
        *extra,
    ]


def parse(settings: Settings, *, build: bool = False) -> Any:
    """The project's manifest (dbt's Manifest), for a later ``run_dbt(..., manifest=)`` to reuse."""
    from dbt.cli.main import dbtRunner

    with _profile_env(settings, build):
        res = dbtRunner().invoke(dbt_args(settings, "parse", "--quiet"))
    if isinstance(res.exception, KeyboardInterrupt):
        raise res.exception
    if not res.success or res.result is None:
        raise SyncError(f"dbt parse failed: {_first_line(res.exception)}")
    return res.result


def incremental_models(manifest: Any) -> list[tuple[str, str]]:
    """(schema, table) of every incremental model, as the manifest names them."""
    return sorted(
        (n.schema, n.alias or n.name)
        for n in manifest.nodes.values()
        if n.resource_type == "model" and n.config.materialized == "incremental"
    )


def _first_line(exc: BaseException | None) -> str:
    text = str(exc).strip() if exc else ""
    return text.splitlines()[0] if text else "see dbt output"


def run_dbt(
    settings: Settings, command: str, *extra: str, build: bool = False, manifest: Any = None
) -> list[NodeResult]:
    """Invoke dbt; raise SyncError naming the first failing node. Ctrl-C: dbt cancels its queries
    on the server, then the KeyboardInterrupt goes on (dbt would return it as a failed result)."""
    from dbt.cli.main import dbtRunner

    with _profile_env(settings, build):
        res = dbtRunner(manifest=manifest).invoke(dbt_args(settings, command, *extra))
    if isinstance(res.exception, KeyboardInterrupt):
        raise res.exception
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
            f"{first.message.splitlines()[0] if first.message else first.status} (log: {log_dir(settings)}/dbt.log)"
        )
    if not res.success:
        raise SyncError(f"dbt {command} failed: {_first_line(res.exception)} (log: {log_dir(settings)}/dbt.log)")
    return results
