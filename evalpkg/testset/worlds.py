"""The reference worlds: where a release's claims about its data hold (every tagged trap bites, every
premise holds, no two tasks of a template share an answer).

These claims depend on the snapshot: the de-identification key shifts each patient's dates, so which
rows a month or a year holds changes with the key, and a thin slice may hold no trap row at all. A
release therefore makes them for fixed worlds anyone can rebuild: the README's world (README_PATIENTS, the
reference scale, seed 7) under four fixed keys, another seed and another size; on any other snapshot `testset
validate` reports how many traps bite there.

Each world is built once into a PostgreSQL cluster of its own under the state directory
(`<state_dir>/worlds/`, never the user's own cluster), and started only while something reads it:
building one takes about a minute on 2 cores (the missing ones are built two at a time), opening a second.
`testset validate --reference-worlds`, reselection, adjudication and scoring in every world
(`semantic_accuracy`, which builds the missing ones) share them. A world is rebuilt when what makes it
changes (the generator or the dbt project: `recipe()`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from evalpkg.errors import ServiceError
from evalpkg.net import free_port
from evalpkg.progress import Progress, quiet
from evalpkg.settings import PROD_DB, PROJECT_ROOT, README_PATIENTS, Settings


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
    *(World(README_PATIENTS, 7, k) for k in range(4)),  # the README's world under four keys
    World(README_PATIENTS, 8, 4),
    World(README_PATIENTS * 3 // 2, 5, 5),
)


def scaled(patients: int) -> tuple[World, ...]:
    """The reference worlds' seeds and keys at another size: each world's patients times patients / the README
    world's (measuring a size before the worlds move to it: benchmarks/premise_support.py, reference_budget.py)."""
    factor = patients / WORLDS[0].patients
    return tuple(World(round(w.patients * factor), w.seed, w.key) for w in WORLDS)


T = TypeVar("T")
MARKER = "world.json"
# What a world is made from: a change in any of these rebuilds it.
RECIPE_SOURCES = (PROJECT_ROOT / "evalpkg" / "prod", PROJECT_ROOT / "dbt_project")
RECIPE_SUFFIXES = {".py", ".sql", ".yml", ".yaml", ".csv"}


def recipe() -> str:
    digest = hashlib.sha256()
    for root in RECIPE_SOURCES:
        for path in sorted(p for p in root.rglob("*") if p.suffix in RECIPE_SUFFIXES and "target" not in p.parts):
            digest.update(str(path.relative_to(PROJECT_ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def home(settings: Settings, world: World) -> Path:
    root = settings.worlds_dir or settings.state_dir / "worlds"
    return root / f"{world.patients}-patients-seed-{world.seed}-key-{world.key}"


def built(settings: Settings, worlds: tuple[World, ...] = WORLDS) -> list[World]:
    """The worlds built from the current recipe."""
    current = recipe()
    return [w for w in worlds if _recipe_of(home(settings, w)) == current]


def _recipe_of(root: Path) -> str | None:
    try:
        return str(json.loads((root / MARKER).read_text(encoding="utf-8"))["recipe"])
    except (OSError, ValueError, KeyError):
        return None


@contextmanager
def opened(settings: Settings, world: World, *, progress: Progress = quiet) -> Iterator[Settings]:
    """The world's cluster, started (built first where it is missing or stale), stopped afterwards. One
    process at a time: another run scoring in the same world waits for it."""
    from evalpkg.services import postgres

    root = home(settings, world)
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f"{root.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = recipe()
        fresh = _recipe_of(root) != current
        if fresh:
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            root.chmod(0o755)  # the 'postgres' user must reach it when this runs as root
        kept = Settings(
            state_dir=root, pg_url=None, pg_port=free_port(), mlflow_port=free_port(), tasks_dir=settings.tasks_dir
        )
        if fresh:
            postgres.init_cluster(kept)
        with suppress(ServiceError):  # a server left running by a process that died reading (we hold the lock)
            postgres.stop(kept)
        postgres.start(kept)
        try:
            if fresh:
                _build(kept, world, progress)
                (root / MARKER).write_text(json.dumps({"world": world.label(), "recipe": current}) + "\n")
            yield kept
        finally:
            postgres.stop(kept)


def _build(kept: Settings, world: World, progress: Progress) -> None:
    from evalpkg.prod.generator import generate
    from evalpkg.services import bootstrap
    from evalpkg.sync.runner import run_sync

    progress(f"building the reference world {world.label()} (once; kept in {kept.state_dir})")
    bootstrap.bootstrap_server(kept)
    generate(kept.db_url(PROD_DB), world.patients, world.seed)
    bootstrap.set_key(kept, world.key_bytes(), replace=True)
    run_sync(kept, full_refresh=True, validate=False)


BUILD_PROCESSES = 2  # worlds built at once: generating (Python) and syncing (the server) share 2 cores well


def _opened_only(kept: Settings) -> None:
    """Nothing: opening a world builds it where it is missing."""


def _run_in(settings: Settings, world: World, work: Callable[[Settings], T]) -> T:
    with opened(settings, world) as kept:
        return work(kept)


def _in_processes(
    settings: Settings, worlds: tuple[World, ...], work: Callable[[Settings], T], done: Callable[[World, int], None]
) -> list[T]:
    """work in each world, BUILD_PROCESSES worlds at a time, each in a process of its own (dbt keeps global state,
    so two builds never share one; work must be picklable: a module's function or a partial of one)."""
    spawn = multiprocessing.get_context("spawn")  # no server connection or thread crosses a fork
    with ProcessPoolExecutor(BUILD_PROCESSES, mp_context=spawn) as pool:
        futures = {pool.submit(_run_in, settings, w, work): w for w in worlds}
        for n, finished in enumerate(as_completed(futures), 1):
            finished.result()  # the first failure, as soon as it happens
            done(futures[finished], n)
        return [f.result() for f in futures]


def _no_children() -> bool:
    """A Celery pool's task may start no process ("daemonic processes are not allowed to have children")."""
    return multiprocessing.current_process().daemon


def build_missing(settings: Settings, worlds: tuple[World, ...] = WORLDS, *, progress: Progress = quiet) -> None:
    """Build the worlds not built from the current recipe, BUILD_PROCESSES at a time."""
    ready = set(built(settings, worlds))
    missing = tuple(w for w in worlds if w not in ready)
    if len(missing) < 2 or _no_children():
        return  # one is built where it is opened, with its progress; so is each where there may be no children
    where = home(settings, missing[0]).parent
    progress(f"building {len(missing)} reference worlds, {BUILD_PROCESSES} at a time (once; kept under {where})")
    _in_processes(
        settings,
        missing,
        _opened_only,
        lambda w, n: progress(f"built the reference world {w.label()} ({n}/{len(missing)})"),
    )


def each(
    settings: Settings, worlds: tuple[World, ...] = WORLDS, *, progress: Progress = quiet
) -> Iterator[tuple[World, Settings]]:
    """Each world in turn, opened (the missing ones built first, in parallel)."""
    build_missing(settings, worlds, progress=progress)
    for world in worlds:
        with opened(settings, world, progress=progress) as kept:
            yield world, kept


def map_each(
    settings: Settings,
    work: Callable[[Settings], T],
    worlds: tuple[World, ...] = WORLDS,
    *,
    progress: Progress = quiet,
) -> list[tuple[World, T]]:
    """work(world) for each world, in the worlds' order, BUILD_PROCESSES worlds at a time (a missing one built
    first in its process); one at a time where this process may have no children."""
    if len(worlds) < 2 or _no_children():
        return [(world, work(kept)) for world, kept in each(settings, worlds, progress=progress)]
    if missing := len(worlds) - len(built(settings, worlds)):
        progress(f"building {missing} missing reference worlds as they are first read (once)")
    results = _in_processes(
        settings, worlds, work, lambda w, n: progress(f"done in the reference world {w.label()} ({n}/{len(worlds)})")
    )
    return list(zip(worlds, results, strict=True))
