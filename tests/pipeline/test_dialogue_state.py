"""The dialogue state through the real pipeline (toolset emr-v1+state) on the clarification tasks, one
language and one wording (kept small: the suite is long already): the gold agent's state holds every
hidden slot with no question about a filled one; perturb:dropped_slot fails slot accuracy exactly on
the tasks that hide the slot it drops; the states are stored with the run and come back from it."""

from __future__ import annotations

import json

import pytest

from evalpkg.agent.clarify import CLINICIAN_CONFIDENCE
from evalpkg.agent.state_plan import DROPPED_SLOT
from evalpkg.pipeline import store
from evalpkg.pipeline.execute import execute_shard
from evalpkg.pipeline.metrics import paired_measures
from evalpkg.pipeline.plan import normalize
from evalpkg.pipeline.run import Scored, new_run_id, report_run, score_run
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.sql.gold import agent_connection, snapshot_version
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release
from evalpkg.testset.models import Complexity, Language
from tests.pipeline.helpers import imperfections


def run_on_clarification_tasks(settings: Settings, agent: str) -> tuple[str, Scored]:
    """plan_run's plan cut down to the clarification tasks (RunConfig has no task filter), then the
    execute and score stages as a run has them."""
    rel = release.load(settings.tasks_dir)
    config = RunConfig(
        name=agent.replace(":", "-") + "-state",
        agent=agent,
        toolset="emr-v1+state",
        languages=[Language.zh],
        complexities=[Complexity.plain],
        reference_worlds=False,
        testset_version=rel.version,
    )
    with agent_connection(settings) as conn:
        snapshot = snapshot_version(conn)
    instances = [i for i in normalize(rel.tasks, config) if i.task_id.startswith("clar-")]
    run_id = new_run_id(config)
    store.create_run(settings, run_id, config, rel.version, snapshot, instances)
    execute_shard(settings, run_id, 0)
    return run_id, score_run(settings, run_id)


@pytest.fixture(scope="module")
def gold(synced: SyncReport, generated: Settings) -> tuple[str, Scored]:
    return run_on_clarification_tasks(generated, "gold")


def test_gold_state_holds_every_hidden_slot_and_asks_no_filled_one(
    gold: tuple[str, Scored], generated: Settings
) -> None:
    run_id, scored = gold
    tasks = release.load(generated.tasks_dir).by_id()
    assert len(scored.scores) == len({t for t in tasks if t.startswith("clar-")}) > 0
    assert imperfections(scored.scores, tasks) == []  # the state tool leaves the gold's process scores whole
    assert all(s.slot_accuracy == 1.0 and s.questions_about_filled_slots == 0 for s in scored.scores)
    assert all(s.turns_to_complete_state is not None for s in scored.scores)
    o = scored.table["overall"]
    assert o["slot_accuracy"] == 1.0 and o["questions_about_filled_slots"] == 0 and o["state_completion_rate"] == 1
    # stored with the run: what score_run read back from the results DB, and the shard's JSONL, hold the states
    stored = store.trajectories(generated, run_id)
    assert all(t.format_version == 2 and t.final_state() is not None for t in stored)
    for t in stored:  # each hidden slot was filled by the clinician's answer (turn 1) before the gold recorded it
        final = t.final_state()
        assert final is not None
        for hidden in tasks[t.task_id].hidden_slots:
            slot = final.slots[hidden.slot]
            assert (slot.source_turn, slot.confidence, slot.history[0].turn) == (1, CLINICIAN_CONFIDENCE, 1), t.task_id
    lines = (store.run_dir(generated, run_id) / "shard-000.jsonl").read_text("utf-8").splitlines()
    assert all(json.loads(line)["steps"][-1]["state"]["missing_slots"] == [] for line in lines)
    # a resumed shard records nothing again, and the stored states score the same
    assert execute_shard(generated, run_id, 0).recorded == 0
    assert [s.slot_accuracy for s in score_run(generated, run_id, save=False).scores] == [
        s.slot_accuracy for s in scored.scores
    ]


def test_dropped_slot_fails_slot_accuracy_exactly_where_the_slot_is_hidden(
    gold: tuple[str, Scored], generated: Settings
) -> None:
    tasks = release.load(generated.tasks_dir).by_id()
    hiding = {
        t.id for t in tasks.values() if t.id.startswith("clar-") and DROPPED_SLOT in {s.slot for s in t.hidden_slots}
    }
    assert hiding and hiding != {t for t in tasks if t.startswith("clar-")}  # the perturbation tells tasks apart
    run_id, scored = run_on_clarification_tasks(generated, "perturb:dropped_slot")
    assert {s.task_id for s in scored.scores if s.slot_accuracy != 1.0} == hiding
    assert all(s.wrong_slots == DROPPED_SLOT for s in scored.scores if s.task_id in hiding)
    assert all(s.correct for s in scored.scores)  # its SQL replay is the gold's: only the state is wrong
    paired = paired_measures(gold[1].scores, scored.scores)["slot_accuracy"]  # what `evalpkg compare` shows
    assert paired["b"] < paired["a"] == 1.0 and paired["b_better"] == 0
    page = report_run(generated, run_id, scored).read_text("utf-8")
    assert "<h2>Dialogue state</h2>" in page and all(t in page for t in hiding)
