"""Scored in every reference world, too: an answer is semantically correct only where its final SQL
matches the gold in every world, not only on the run's snapshot.

A wrong query can return the right numbers on one snapshot by coincidence: a trap that does not bite
there (a time column that happens to select the same rows), a hard-coded number. The reference worlds
(`testset/worlds.py`, built once and kept) hold other data under the same schema, so the final SQL
and the gold are re-run in each; the idea of distilled test suites for text-to-SQL, applied to an
agent benchmark. Only a snapshot match can be coincidental, so only those are re-run.
"""

from __future__ import annotations

from evalpkg.agent.trajectory import Trajectory
from evalpkg.errors import DataError
from evalpkg.grading.execution import GoldCache, asked_columns, execution_match
from evalpkg.pipeline.score import InstanceScore, graded_answers
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql.executor import ReadOnlyExecutor
from evalpkg.sql.gold import GoldRunner
from evalpkg.testset import worlds
from evalpkg.testset.models import Task

WORLD_BUILD_S = 25  # a reference world of the README's size, built two at a time on 2 cores (six in 2.5 min)


def score_in_worlds(
    settings: Settings,
    scores: list[InstanceScore],
    trajectories: list[Trajectory],
    tasks: dict[str, Task],
    *,
    timeout_ms: int,
    reference: tuple[worlds.World, ...] = worlds.WORLDS,
    build: bool = False,
    progress: Progress = quiet,
) -> int:
    """Set each score's `semantic_correct` and `world_misses` from the reference worlds: those built, or with
    `build` (a run) every one, the missing ones built first, once. Returns how many worlds were read (without
    `build`, 0: none is built, and the scores say "not measured")."""
    # the SQL turn 0 stood on (what `correct` grades); a dialogue's last query answers its last follow-up
    final_sql = {t.instance_id: _turn_zero_sql(tasks, t) for t in trajectories if t.task_id in tasks}
    matched = [s for s in scores if s.answerable and s.correct]
    built = worlds.built(settings, reference)
    if not build:
        read = built
        if not read:
            return 0
    else:  # every reference world, the missing ones built first; none when no answer matched (none can tell)
        read = list(reference) if matched else []
        if missing := sum(w not in built for w in read):
            progress(
                f"semantic accuracy reads {len(read)} reference worlds: building the {missing} missing (once, "
                f"about {WORLD_BUILD_S * missing} s on 2 cores; --no-reference-worlds scores the snapshot only)"
            )
    for world, kept in worlds.each(settings, tuple(read), progress=progress):
        executor = ReadOnlyExecutor(kept.agent_url(), timeout_ms=timeout_ms)
        gold = GoldCache(GoldRunner(executor))
        seen: dict[tuple[str, str | None, str, str], bool | None] = {}  # repeats and variants often send one query
        try:
            for s in matched:
                key = (s.task_id, final_sql.get(s.instance_id), s.language, s.complexity)
                if key not in seen:
                    seen[key] = _matches(tasks[s.task_id], s, key[1], gold)
                if seen[key] is False:
                    s.world_misses.append(world.label())
        finally:
            executor.close()
    for s in scores:
        s.semantic_correct = s.correct and not s.world_misses
    coincidental = sum(bool(s.world_misses) for s in matched)
    progress(f"scored in {len(read)} reference worlds: {coincidental} of {len(matched)} matches are coincidental")
    return len(read)


def _turn_zero_sql(tasks: dict[str, Task], traj: Trajectory) -> str | None:
    answered = graded_answers(tasks[traj.task_id], traj)[0]
    return answered[1] if answered else None


def _matches(task: Task, score: InstanceScore, sql: str | None, gold: GoldCache) -> bool | None:
    """Whether the answer matches in this world; None where the world cannot tell (the gold fails there,
    or returns more than the fetch cap), which is not held against the answer."""
    worded = task.graded_for(score.language, score.complexity)  # the golds the instance's wording admits
    try:
        return execution_match(worded, sql, gold, asked_columns(task, score.language, score.complexity))[1]
    except DataError:
        return None
