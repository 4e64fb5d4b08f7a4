"""The reference worlds: where a release's claims about its data hold (every tagged trap bites, every
premise holds, no two tasks of a template share an answer).

These claims depend on the snapshot: the de-identification key shifts each patient's dates, so which
rows a month or a year holds changes with the key, and a thin slice may hold no trap row at all. A
release therefore makes them for fixed worlds anyone can rebuild: the README's world (2,000 patients,
seed 7) under four fixed keys, another seed and another size. They are built one after the other in
a scratch cluster, never in the user's own; on any other snapshot `testset validate` reports how many
traps bite there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from evalpkg.progress import Progress, quiet
from evalpkg.settings import PROD_DB, Settings


@dataclass(frozen=True)
class World:
    patients: int
    seed: int
    key: int  # which fixed de-identification key

    def label(self) -> str:
        return f"{self.patients} patients, seed {self.seed}, key #{self.key}"

    def key_bytes(self) -> bytes:
        return hashlib.sha256(f"evalpkg reference world key {self.key}".encode()).digest()


WORLDS: tuple[World, ...] = (
    *(World(2000, 7, k) for k in range(4)),  # the README's world (and the tests') under four keys
    World(2000, 8, 4),
    World(3000, 5, 5),
)


def build(
    worlds: tuple[World, ...] = WORLDS, *, tasks_dir: Path | None = None, progress: Progress = quiet
) -> Iterator[tuple[World, Settings]]:
    """Each world in turn, synced in one scratch cluster (the next world replaces the previous one)."""
    from evalpkg.prod.generator import generate
    from evalpkg.services import bootstrap
    from evalpkg.services.stack import scratch_cluster
    from evalpkg.sync.runner import run_sync

    with scratch_cluster(**({"tasks_dir": tasks_dir} if tasks_dir else {})) as scratch:
        made: tuple[int, int] | None = None
        for world in worlds:
            progress(f"building the reference world {world.label()}")
            if made != (world.patients, world.seed):
                generate(scratch.db_url(PROD_DB), world.patients, world.seed)
                made = (world.patients, world.seed)
            bootstrap.set_key(scratch, world.key_bytes(), replace=True)
            run_sync(scratch, full_refresh=True, validate=False)
            yield world, scratch
