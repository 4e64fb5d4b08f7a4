"""The reference agents' dialogue state (toolset emr-v1+state): the gold plan with update_state calls.
Before its first question the gold agent records every slot a query needs that the question states
(their values are not annotated: it records that they are given) and marks the task's hidden slots
open; each clarifying question then reaches the first missing slot, which is a hidden one; after the
answers it records the hidden slots' values as the clinician revealed them. Its SQL replay stays as
it is. perturb:dropped_slot is the same agent whose state never holds DROPPED_SLOT: it neither marks
it open nor asks about it, so slot accuracy fails exactly on the tasks whose hidden slot it is."""

from __future__ import annotations

from typing import Any

from evalpkg.agent.policies import CallScript
from evalpkg.agent.state import REQUIRED
from evalpkg.agent.tools import STATE_TOOL
from evalpkg.testset.models import Task

GIVEN = "as stated in the question"  # a slot the question fills; the test set annotates no finer value
DROPPED_SLOT = "department"  # what perturb:dropped_slot leaves out of its state
STATED_SLOTS: tuple[str, ...] = (*REQUIRED, "time_column")  # every slot a query can need by default


def with_state(task: Task, plan: CallScript, dropped: str | None = None) -> CallScript:
    """`plan` with the state kept: the stated slots and the open hidden ones recorded before the first
    ask_clarify, one ask_clarify per hidden slot (each asks the next missing one), and the revealed
    values recorded after the last. Without a question in the plan, only the stated slots."""
    hidden = [s for s in task.hidden_slots if s.slot != dropped]
    stated: dict[str, Any] = {s: GIVEN for s in STATED_SLOTS if s not in {h.slot for h in task.hidden_slots}}
    opened = [s.slot for s in hidden if s.slot not in STATED_SLOTS]
    first = next((i for i, step in enumerate(plan) if any(n == "ask_clarify" for n, _ in step)), None)
    if first is None or not hidden:
        out = [step for step in plan if not any(n == "ask_clarify" for n, _ in step)] if dropped else list(plan)
        return [[(STATE_TOOL, stated)], *out]
    ask = plan[first]
    record: dict[str, Any] = {s.slot: s.value for s in hidden}
    return [
        *plan[:first],
        [(STATE_TOOL, {**stated, "open_slots": opened} if opened else stated)],
        *([ask] * len(hidden)),
        [(STATE_TOOL, record)],
        *plan[first + 1 :],
    ]
