"""What the report shows of each instance: one compact row in the page's instance table, and the
drill-down of its trajectory, stored apart from the page and read by the browser only when opened.
Both are stored (in the page and in its chunk files), so both carry a format version."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel

from evalpkg.agent.trajectory import Trajectory
from evalpkg.pipeline.cluster import Cluster
from evalpkg.pipeline.score import InstanceScore

REPORT_VIEW_FORMAT_VERSION = 1
ARGUMENTS_CHARS, RESULT_CHARS, TEXT_CHARS = 2000, 3000, 4000  # what the inlined drill-down showed before
Outcome = Literal["correct", "incorrect", "error"]
OUTCOMES: tuple[Outcome, ...] = ("correct", "incorrect", "error")
NO_CLUSTER = -1  # a correct instance, or a failure no cluster holds (clusters from an earlier scoring)


def outcome(s: InstanceScore) -> Outcome:
    """`error` when the dialogue ended without an answer (a limit, a model or parse error, a timeout)
    or its final SQL fails when run again: an incorrect answer tells about the agent's reasoning, an
    error mostly about its running."""
    if s.correct:
        return "correct"
    if s.stop_reason != "final_answer" or (s.final_sql is not None and s.status == "failure"):
        return "error"
    return "incorrect"


class CallView(BaseModel):
    name: str
    ok: bool
    arguments: str  # JSON, cut at ARGUMENTS_CHARS
    result: str  # what the model read, cut at RESULT_CHARS
    sql: str | None  # the SQL the call ran (a plan compiled by submit_plan)


class StepView(BaseModel):
    index: int
    model_text: str
    parse_error: str
    user_message: str  # the simulated clinician's reply after this step
    calls: list[CallView]


class TrajectoryView(BaseModel):
    """The drill-down of one instance: its score's story and every step of its trajectory."""

    instance_id: str
    question: str
    answer: str
    final_sql: str | None
    status: str
    stop_reason: str
    error_text: str
    world_misses: list[str]
    state: str | None  # the final dialogue state in one line; None without the state toolset
    state_scores: dict[str, str] | None
    steps: list[StepView]


class ChunkFile(BaseModel):
    """One file of trajectories beside the page, loaded as a script that hands it to the page."""

    format_version: int = REPORT_VIEW_FORMAT_VERSION
    chunk: int
    trajectories: list[TrajectoryView]


# One row: the instance id as its task (a position in InstanceTable.tasks) and the rest of the id, then
# positions in InstanceTable's lists (type, difficulty, outcome, stop reason, cluster or NO_CLUSTER), then
# the chunk that holds its trajectory. An id written once per task keeps a row about 40 bytes.
Row = tuple[int, str, int, int, int, int, int, int]
ROW_FIELDS = ("task", "id_rest", "type", "difficulty", "outcome", "stop_reason", "cluster", "chunk")  # as report.js


class InstanceTable(BaseModel):
    """Every instance in one short row, embedded in the page: what the filters search and the table lists."""

    format_version: int = REPORT_VIEW_FORMAT_VERSION
    files: str  # the folder of chunk files, relative to the page
    chunks: int
    tasks: list[str]  # "" when an instance id does not start with its task id: the rest is all of it
    types: list[str]
    difficulties: list[str]
    outcomes: list[str]
    stop_reasons: list[str]
    clusters: list[str]  # "id: name", in the order of the run's clusters
    rows: list[Row]

    def decoded(self) -> list[dict[str, Any]]:
        """The rows as the page shows them (for readers other than the page)."""
        out = []
        for task, rest, kind, difficulty, result, stop, cluster, chunk in self.rows:
            out.append(
                {
                    "instance_id": self.tasks[task] + rest,
                    "type": self.types[kind],
                    "difficulty": self.difficulties[difficulty],
                    "outcome": self.outcomes[result],
                    "stop_reason": self.stop_reasons[stop],
                    "cluster": None if cluster == NO_CLUSTER else self.clusters[cluster],
                    "chunk": chunk,
                }
            )
        return out


def state_line(t: Trajectory | None) -> str | None:
    state = t.final_state() if t else None
    if state is None:
        return None
    slots = {k: v.current for k, v in state.slots.items() if v.current}
    return f"{json.dumps(slots, ensure_ascii=False)}; missing {', '.join(state.missing_slots) or 'none'}"


def state_scores(s: InstanceScore) -> dict[str, str] | None:
    if s.questions_about_filled_slots is None:
        return None
    return {
        "slot accuracy": "-" if s.slot_accuracy is None else f"{s.slot_accuracy:.3f}",
        "wrong slots": s.wrong_slots or "-",
        "questions about filled slots": str(s.questions_about_filled_slots),
        "turns to complete state": "never" if s.turns_to_complete_state is None else str(s.turns_to_complete_state),
    }


def trajectory_view(s: InstanceScore, t: Trajectory | None) -> TrajectoryView:
    steps = [
        StepView(
            index=step.index,
            model_text=step.model_text[:TEXT_CHARS],
            parse_error=step.parse_error,
            user_message=step.user_message,
            calls=[
                CallView(
                    name=c.name,
                    ok=c.ok,
                    arguments=json.dumps(c.arguments, ensure_ascii=False)[:ARGUMENTS_CHARS],
                    result=c.result[:RESULT_CHARS],
                    sql=c.sql,
                )
                for c in step.tool_calls
            ],
        )
        for step in (t.steps if t else [])
    ]
    return TrajectoryView(
        instance_id=s.instance_id,
        question=t.question if t else "",
        answer=t.final_answer if t else "",
        final_sql=s.final_sql,
        status=s.status,
        stop_reason=s.stop_reason,
        error_text=s.error_text,
        world_misses=s.world_misses,
        state=state_line(t),
        state_scores=state_scores(s),
        steps=steps,
    )


def instance_table(
    scores: list[InstanceScore], chunk_of: Mapping[str, int], clusters: list[Cluster], assignment: Mapping[str, int]
) -> InstanceTable:
    """`scores` in the order the table lists them; `chunk_of` says where each trajectory is."""

    def positions(values: list[str]) -> dict[str, int]:
        return {v: i for i, v in enumerate(values)}

    tasks = sorted({s.task_id if s.instance_id.startswith(s.task_id) else "" for s in scores})
    types = sorted({s.type for s in scores})
    difficulties = sorted({s.difficulty for s in scores})
    stops = sorted({s.stop_reason for s in scores})
    at_task, at_type, at_difficulty, at_stop = map(positions, (tasks, types, difficulties, stops))
    cluster_at = {c.cluster: i for i, c in enumerate(clusters)}
    rows: list[Row] = []
    for s in scores:
        task = s.task_id if s.instance_id.startswith(s.task_id) else ""
        cluster = NO_CLUSTER if s.correct else cluster_at.get(assignment.get(s.instance_id, NO_CLUSTER), NO_CLUSTER)
        rows.append(
            (
                at_task[task],
                s.instance_id[len(task) :],
                at_type[s.type],
                at_difficulty[s.difficulty],
                OUTCOMES.index(outcome(s)),
                at_stop[s.stop_reason],
                cluster,
                chunk_of[s.instance_id],
            )
        )
    return InstanceTable(
        files="",
        chunks=max(chunk_of.values(), default=-1) + 1,
        tasks=tasks,
        types=types,
        difficulties=difficulties,
        outcomes=list(OUTCOMES),
        stop_reasons=stops,
        clusters=[f"{c.cluster}: {c.name}" for c in clusters],
        rows=rows,
    )
