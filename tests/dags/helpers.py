"""What the DAG tests share: the checkout's files as dbt could change them, one ehr_deid_sync run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpkg.settings import PROJECT_ROOT


def checkout_files() -> dict[str, tuple[int, int]]:
    """(mtime, size) of everything dbt could write in the checkout: the project and ./logs."""
    out = {}
    for root in (PROJECT_ROOT / "dbt_project", PROJECT_ROOT / "logs"):
        for path in [root, *root.rglob("*")] if root.exists() else []:
            st = path.lstat()
            out[str(path.relative_to(PROJECT_ROOT))] = (st.st_mtime_ns, st.st_size)
    return out


def file_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


@dataclass
class SyncDagRun:
    """ehr_deid_sync run once with dag.test(), with what it could have changed, before and after."""

    run: Any  # the DagRun
    marts_before: dict[str, str]
    marts_after: dict[str, str]
    checkout_before: dict[str, tuple[int, int]]
    checkout_after: dict[str, tuple[int, int]]
    dbt_log_before: int  # bytes in evalpkg's dbt.log under the state directory
    dbt_log_after: int
