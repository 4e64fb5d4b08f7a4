"""A shard with the openai agent and the LLM-played clinician: every dialogue of the shard shares
one model client (few connections, never more requests in flight than the concurrency), retries
are recorded, and each instance is recorded exactly once."""

from __future__ import annotations

from evalpkg.pipeline import store
from evalpkg.pipeline.execute import execute_shard
from evalpkg.pipeline.run import plan_run
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.sync.runner import SyncReport
from tests.agent.fake_endpoint import FakeEndpoint, serving

FOLLOWUP_REQUESTS = 1  # the fake model answers a follow-up at once, from the query it ran for the question


def test_one_shared_client_serves_every_dialogue_and_the_clinician(synced: SyncReport, generated: Settings) -> None:
    endpoint = FakeEndpoint(failures=[503], delay_s=0.02, clarify=True)
    with serving(endpoint) as url:
        config = RunConfig(
            name="openai-shard",
            agent="openai",
            endpoint=url,
            model="m",
            user_simulator="llm",
            limit=15,
            complexities=["plain"],
            concurrency=6,
            eval_db_pool=2,
            results_db_pool=1,
        )
        run_id = plan_run(generated, config)
        report = execute_shard(generated, run_id, 0)
        again = execute_shard(generated, run_id, 0)
    assert report.recorded == report.planned == 30 and again.recorded == 0 and again.skipped == 30
    trajectories = store.trajectories(generated, run_id)
    assert len(trajectories) == 30 and all(t.stop_reason == "final_answer" for t in trajectories)
    assert all(t.clarifications[0]["answer"] == "last 3 months" for t in trajectories)
    retries = [r for t in trajectories for s in t.steps for r in s.retries]
    retries += [r for t in trajectories for c in t.clarifications for r in c.get("retries", [])]
    assert len(retries) == 1  # the one 503, retried and recorded where it happened
    followups = sum(len(t.turn_answers) for t in trajectories)  # each follow-up: one more answer turn
    assert endpoint.requests == 30 * 3 + 1 + followups * FOLLOWUP_REQUESTS, (endpoint.requests, followups)
    assert endpoint.peak <= 6
    assert len(endpoint.connections) <= 6  # one pool of kept-alive connections, not a client per dialogue
