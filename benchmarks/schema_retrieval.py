"""Two-stage schema retrieval on every question variant of the latest release: how often the gold
tables are among the candidates, and how much schema text the model is spared compared with
dumping the whole schema. Needs a synced eval DB (scripts/demo):

    .venv/bin/python benchmarks/schema_retrieval.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalpkg.agent.session import load_shared
from evalpkg.settings import get_settings
from evalpkg.testset import release


def main() -> None:
    settings = get_settings()
    shared = load_shared(settings)
    tasks = [t for t in release.load(settings.tasks_dir).tasks if t.answerable]
    full = len(shared.catalog.full_text())
    hits = total = chars = 0
    t0 = time.perf_counter()
    for task in tasks:
        needed = {t for t in task.tables if t.startswith("t_")}
        for variant in task.variants:
            candidates = shared.index.candidate_tables(variant.text)
            hits += needed <= set(candidates)
            total += 1
            chars += sum(len(shared.catalog.table_text(c)) for c in candidates)
    elapsed = time.perf_counter() - t0
    print(f"questions (answerable variants)     {total:>8}")
    print(f"gold tables among candidates           {hits / total:>8.1%}   (target >= 95%)")
    print(
        f"schema text vs whole-schema dump       {chars / total / full:>8.1%}   "
        f"= {1 - chars / total / full:.1%} less (target >= 70% less)"
    )
    print(f"retrieval time per question            {elapsed / total * 1000:>8.2f} ms")


if __name__ == "__main__":
    main()
