"""Shared by the pipeline tests: run an agent through every stage, and name every instance whose
scores are not perfect."""

from __future__ import annotations

from typing import Any

from evalpkg.pipeline.execute import execute_shard
from evalpkg.pipeline.run import Scored, plan_run, score_run
from evalpkg.pipeline.score import InstanceScore
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.testset.models import Task


def run_agent(settings: Settings, agent: str, **kw: Any) -> tuple[str, Scored]:
    # scoring in reference worlds is tested on its own (test_pipeline); a world an earlier test built
    # would otherwise re-run every match of every test's run there
    config = RunConfig(name=agent.replace(":", "-"), agent=agent, **{"concurrency": 4, "reference_worlds": False, **kw})
    run_id = plan_run(settings, config)
    for shard in range(config.shards):
        execute_shard(settings, run_id, shard)
    return run_id, score_run(settings, run_id)


def imperfections(scores: list[InstanceScore], tasks: dict[str, Task]) -> list[str]:
    """One line per instance and metric that a perfect agent would not have, naming the missed
    answer points and the failed calls, so a failing assertion says what went wrong where."""
    out = []
    for s in scores:
        task = tasks[s.task_id]
        checks = {
            "correct": s.correct,
            "exec_match": s.exec_match or not s.answerable,
            "executable_sql": s.executable_sql or not s.answerable,
            "expected_precision": s.expected_precision == 1,
            "expected_recall": s.expected_recall == 1,
            "call_order": s.order_ok,
            "redundant_calls": s.redundant_calls == 0,
            "clarification": s.clarification_correct,
            "answer_coverage": s.answer_coverage in (None, 1.0),
        }
        for metric, ok in checks.items():
            if not ok:
                detail = f"calls {s.tool_names}; errors {s.error_text[:160]!r}"
                if metric == "answer_coverage":
                    detail = f"missed {[task.answer_points[i].model_dump(exclude_none=True) for i in s.missed_points]}"
                out.append(f"{s.instance_id}: {metric} (coverage {s.answer_coverage}); {detail}")
    return out
