"""Scores of the dialogue state (toolset emr-v1+state): the final state against the task's
hidden slots, clarifying questions about slots the state already held, and how many dialogue turns
(model steps) it took until no slot was missing. Every measure is None for a run without a state."""

from __future__ import annotations

from dataclasses import dataclass

from evalpkg.agent.trajectory import Trajectory
from evalpkg.pipeline.coverage import compact_text
from evalpkg.testset.models import HiddenSlot, Task


@dataclass(frozen=True)
class StateScores:
    slot_accuracy: float | None = None  # hidden slots the final state holds rightly; None: no state or none hidden
    wrong_slots: str = ""  # the hidden slots it misses or holds wrongly, comma-separated (one column, for GX)
    questions_about_filled_slots: int | None = None
    turns_to_complete_state: int | None = None  # None also when the state never became complete


def holds(value: str | None, hidden: HiddenSlot) -> bool:
    """The slot's value is the hidden one: its annotated value, or the clinician's words in either
    language (what an agent that copies the reply records), compared NFKC- and case-normalized."""
    if not value:
        return False
    return compact_text(value) in {compact_text(hidden.value), *(compact_text(a) for a in hidden.answer.values())}


def score_state(task: Task, traj: Trajectory) -> StateScores:
    final = traj.final_state()
    if final is None:
        return StateScores()
    wrong = [h.slot for h in task.hidden_slots if not holds(final.value(h.slot), h)]
    accuracy = 1 - len(wrong) / len(task.hidden_slots) if task.hidden_slots else None
    # a question is about a filled slot by what it was asked about or by what the clinician heard in it
    heard = [set(c.get("slots", [])) for c in traj.clarifications]
    wasted = 0
    for i, q in enumerate(final.questions):
        about = set(q.about) | (heard[i] if i < len(heard) else set())
        wasted += bool(about & set(q.filled_when_asked))
    complete = next(
        (s.index + 1 for s in traj.steps if s.state is not None and not s.state.missing_slots),
        None,
    )
    return StateScores(accuracy, ",".join(wrong), wasted, complete)
