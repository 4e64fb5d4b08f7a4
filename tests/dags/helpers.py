"""What the DAG tests share: the checkout's files as dbt could change them."""

from __future__ import annotations

from pathlib import Path

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
