"""The shard's model client: failed calls are retried with backoff and every retry is recorded on
the trajectory, errors that retrying cannot fix are not retried, requests in flight stay under the
limit over reused connections, and trajectories stored before retries were recorded still load."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evalpkg.agent.loop import run_dialogue
from evalpkg.agent.model_client import ModelClient
from evalpkg.agent.policies import OpenAIPolicy
from evalpkg.agent.trajectory import Trajectory
from tests.agent.conftest import NewToolkit
from tests.agent.fake_endpoint import FakeEndpoint, serving


def dialogue(url: str, new_toolkit: NewToolkit, **client: Any) -> Trajectory:
    policy = OpenAIPolicy(client=ModelClient(url, backoff_s=0.001, **client), model="m")
    try:
        return run_dialogue(
            policy, new_toolkit(), instance_id="i-1", task_id="t-1", language="zh", complexity="plain", question="q"
        )
    finally:
        policy.client.close()


def test_rate_limits_and_server_errors_are_retried_and_recorded(new_toolkit: NewToolkit) -> None:
    endpoint = FakeEndpoint(failures=[429, 503])
    with serving(endpoint) as url:
        traj = dialogue(url, new_toolkit)
    assert traj.stop_reason == "final_answer" and traj.final_answer == "There are 12 departments."
    first = traj.steps[0]
    assert [r.attempt for r in first.retries] == [1, 2]
    assert "RateLimitError" in first.retries[0].error and "InternalServerError" in first.retries[1].error
    assert all(r.wait_s > 0 for r in first.retries) and traj.steps[1].retries == []
    assert first.tool_calls[0].ok  # the dialogue went on with the answer of the third attempt
    stored = traj.model_dump(mode="json")
    for step in stored["steps"]:
        del step["retries"]  # as trajectories were stored before retries were recorded
    assert Trajectory.model_validate(stored).steps[0].retries == []


def test_past_the_retry_budget_the_dialogue_ends_with_every_retry_recorded(new_toolkit: NewToolkit) -> None:
    with serving(FakeEndpoint(failures=[500] * 3)) as url:
        traj = dialogue(url, new_toolkit, max_retries=2)
    assert traj.stop_reason == "model_error" and "InternalServerError" in traj.steps[0].parse_error
    assert len(traj.steps[0].retries) == 2
    with serving(FakeEndpoint(failures=[400])) as url:  # a bad request stays bad: not retried
        traj = dialogue(url, new_toolkit)
    assert traj.stop_reason == "model_error" and traj.steps[0].retries == []


def test_requests_in_flight_stay_under_the_limit_over_reused_connections() -> None:
    endpoint = FakeEndpoint(delay_s=0.05)
    with serving(endpoint) as url:
        client = ModelClient(url, max_in_flight=3)
        request = {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}
        with ThreadPoolExecutor(12) as pool:
            list(pool.map(lambda _: client.chat([], **request), range(36)))
        client.close()
    assert endpoint.requests == 36 and endpoint.peak == 3
    assert len(endpoint.connections) <= 3  # kept alive and shared, not one per call


def test_every_call_is_bounded_in_tokens_and_ends_by_the_dialogue_deadline(new_toolkit: NewToolkit) -> None:
    with serving(endpoint := FakeEndpoint()) as url:
        traj = dialogue(url, new_toolkit, max_tokens=77)
    assert traj.stop_reason == "final_answer" and endpoint.max_tokens == [77, 77]
    slow = FakeEndpoint(delay_s=5)
    with serving(slow) as url:
        client = ModelClient(url, timeout_s=60)
        policy = OpenAIPolicy(client=client, model="m", deadline=time.monotonic() + 1)
        t0 = time.monotonic()
        traj = run_dialogue(
            policy, new_toolkit(), instance_id="i-2", task_id="t-1", language="zh", complexity="plain", question="q"
        )
        client.close()
    assert traj.stop_reason == "model_error" and "APITimeoutError" in traj.steps[0].parse_error
    assert time.monotonic() - t0 < 3  # the dialogue's deadline, not the client's 60 s
    assert slow.max_tokens == [1024]  # the default bound
