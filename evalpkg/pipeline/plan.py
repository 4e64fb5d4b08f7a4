"""Stage 1, normalize: tasks x variants x repeats -> run instances with stable ids and shards."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel

from evalpkg.pipeline.config import RunConfig
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


def normalize(tasks: list[Task], config: RunConfig) -> list[Instance]:
    selected = sorted(tasks, key=lambda t: t.id)[: config.limit] if config.limit else sorted(tasks, key=lambda t: t.id)
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
