"""Stage 1, normalize: tasks x variants x repeats -> run instances with stable ids and shards."""

from __future__ import annotations

import hashlib
from collections import defaultdict

from pydantic import BaseModel

from evalpkg.runconfig import RunConfig
from evalpkg.testset.models import Task


class Instance(BaseModel):
    instance_id: str
    task_id: str
    language: str
    complexity: str
    repeat: int
    shard: int


def shard_of(instance_id: str, shards: int) -> int:
    """Stable across processes and machines (unlike hash())."""
    return int(hashlib.sha256(instance_id.encode()).hexdigest()[:8], 16) % shards


def _rank(task_id: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()


def cell(task: Task) -> str:
    return f"{task.type.value}/{task.difficulty.value}"


def stratified_sample(tasks: list[Task], n: int, seed: int = 0) -> list[Task]:
    """n tasks drawn deterministically (per seed) over task type x difficulty: one from every cell when n
    allows (from n of them, else), the rest in proportion to the cells' sizes (largest remainders)."""
    if n >= len(tasks):
        return sorted(tasks, key=lambda t: t.id)
    cells: dict[str, list[Task]] = defaultdict(list)
    for task in sorted(tasks, key=lambda t: _rank(t.id, seed)):
        cells[cell(task)].append(task)
    keys = sorted(cells, key=lambda k: _rank(k, seed))
    take = {k: 1 if i < n else 0 for i, k in enumerate(keys)}
    spare, rest = n - sum(take.values()), sum(len(cells[k]) - 1 for k in keys)
    if spare > 0:
        quota = {k: spare * (len(cells[k]) - 1) / rest for k in keys}
        for k in keys:
            take[k] += int(quota[k])
        left = n - sum(take.values())
        for k in sorted(keys, key=lambda k: (int(quota[k]) - quota[k], _rank(k, seed)))[:left]:
            take[k] += 1
    return sorted((t for k in keys for t in cells[k][: take[k]]), key=lambda t: t.id)


def sampled_cells(tasks: list[Task], selected: list[Task]) -> str:
    """What a sample covers, for the run's summary: 'a sample of 21 of 321 tasks, ...: 21 of 21 cells'
    and, when it lacks some, the shorter list of the cells it holds or those it lacks."""
    every, chosen = {cell(t) for t in tasks}, {cell(t) for t in selected}
    missing = every - chosen
    which = ""
    if missing:
        held = len(chosen) <= len(missing)
        which = f" ({'only' if held else 'not'} {', '.join(sorted(chosen if held else missing))})"
    return (
        f"a sample of {len(selected)} of {len(tasks)} tasks, stratified over type x difficulty: "
        f"{len(chosen)} of {len(every)} cells{which}"
    )


def normalize(tasks: list[Task], config: RunConfig) -> list[Instance]:
    selected = (
        stratified_sample(tasks, config.limit, config.seed) if config.limit else sorted(tasks, key=lambda t: t.id)
    )
    out = []
    for task in selected:
        for lang in config.languages:
            for level in config.complexities:
                for r in range(config.repeats):
                    iid = f"{task.id}:{lang.value}:{level.value}:r{r}"
                    out.append(
                        Instance(
                            instance_id=iid,
                            task_id=task.id,
                            language=lang.value,
                            complexity=level.value,
                            repeat=r,
                            shard=shard_of(iid, config.shards),
                        )
                    )
    return out
