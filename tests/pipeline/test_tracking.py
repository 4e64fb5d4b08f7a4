"""Trajectories tracked as MLflow traces in bulk (OTLP span exports) on a real MLflow server: every trace
linked to its parent run with the spans MLflow's span API writes, none twice after a re-log, an export the
server refuses named as a ServiceError of tracking (how many of how many arrived), and a server without
the OTLP route served through the span API."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from evalpkg.agent.trajectory import Step, ToolCallRecord, Trajectory, sha256_text
from evalpkg.errors import ServiceError
from evalpkg.net import free_port
from evalpkg.pipeline import trace_export, tracking
from evalpkg.runconfig import RunConfig
from evalpkg.services import mlflow_server
from evalpkg.settings import Settings
from tests.pipeline.test_metrics import score

N = 250  # three requests, the last one partial
server = pytest.mark.server  # starts an MLflow server


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(state_dir=tmp_path_factory.mktemp("mlflow"), mlflow_port=free_port(), mlflow_uri=None)
    mlflow_server.start(settings)
    try:
        yield settings.tracking_uri
    finally:
        mlflow_server.stop(settings)


def _trajectory(n: int) -> Trajectory:
    result = "patient_id,value\n" + "\n".join(f"{k},{k * 1.5}" for k in range(n % 7))
    steps = [
        Step(
            index=j,
            started_at=f"2026-01-01T00:00:0{j}.000+00:00",
            ended_at=f"2026-01-01T00:00:0{j}.500+00:00",
            model_text=f"step {j} of {n}",
            reasoning="读取表结构" if j == 0 else "",
            prompt_tokens=1000 + j,
            completion_tokens=40,
            latency_ms=420.5,
            tool_calls=[
                ToolCallRecord(
                    call_id=f"c{j}",
                    name="query_schema" if j == 0 else "execute_sql",
                    arguments={"table_name": "admissions"} if j == 0 else {"sql": f"select {n}"},
                    ok=True,
                    result=result,
                    result_sha256=sha256_text(result),
                    started_at=f"2026-01-01T00:00:0{j}.100+00:00",
                    elapsed_ms=12.25,
                )
            ],
        )
        for j in range(2)
    ] + [Step(index=2, started_at="2026-01-01T00:00:03.000+00:00", ended_at="2026-01-01T00:00:03.100+00:00")]
    return Trajectory(
        instance_id=f"inst-{n}",
        task_id=f"task-{n % 40}",
        agent="gold",
        language="zh",
        complexity="plain",
        question=f"上个月住院多少人? ({n})",
        steps=steps,
        final_answer=f"{n} 人",
        final_sql=f"select {n}",
        started_at="2026-01-01T00:00:00.000+00:00",
        ended_at="2026-01-01T00:00:04.000+00:00",
    )


TRAJECTORIES = [_trajectory(n) for n in range(N)]
SCORES = [score("task-1:0", instance_id="inst-1")]  # one scored instance: its root span says it is correct


def _log(
    uri: str, run_id: str, trajectories: list[Trajectory] = TRAJECTORIES, artifacts_ready: Any = lambda: None
) -> str:
    shards = {0: ["inst-1"]}
    return tracking.log_run(
        uri, run_id, RunConfig(name="t"), "v6", "snap", {}, SCORES, shards, trajectories, [], None, artifacts_ready
    )


def _traces(uri: str, parent: str) -> list[Any]:
    import mlflow

    client = mlflow.MlflowClient(uri)
    experiment = client.get_run(parent).info.experiment_id
    out, token = [], None
    while True:
        page = client.search_traces(locations=[experiment], run_id=parent, max_results=200, page_token=token)
        out += page
        if not (token := page.token):
            return out


def _held(uri: str, parent: str) -> int:
    import mlflow

    client = mlflow.MlflowClient(uri)
    return tracking.count_traces(client, client.get_run(parent).info.experiment_id, parent)


def _spans(trace: Any) -> list[dict[str, Any]]:
    """What a trace's spans say, without the ids and MLflow's bookkeeping attributes."""
    out = []
    for span in sorted(trace.data.spans, key=lambda s: (s.parent_id is not None, s.start_time_ns, s.name)):
        attributes = {k: v for k, v in span.attributes.items() if not k.startswith("mlflow.")}
        out.append(
            {
                "root": span.parent_id is None,
                "name": span.name,
                "type": span.span_type,
                "inputs": span.inputs,
                "outputs": span.outputs,
                "attributes": attributes,
                "start": span.start_time_ns,
                "end": span.end_time_ns,
                "status": span.status.status_code,
            }
        )
    return out


def _instances(traces: list[Any]) -> list[str]:
    roots = [next(s for s in t.data.spans if s.parent_id is None) for t in traces]
    return [root.attributes["instance_id"] for root in roots]


@server
def test_every_trajectory_is_a_trace_of_the_run_with_its_spans_and_a_relog_replaces_them(
    tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    parent = _log(tracking_uri, "bulk-run")
    assert mlflow.MlflowClient(tracking_uri).get_run(parent).data.tags[tracking.EXPORT_TAG] == "otlp"
    assert _held(tracking_uri, parent) == N
    traces = _traces(tracking_uri, parent)
    assert sorted(_instances(traces)) == sorted(t.instance_id for t in TRAJECTORIES)
    one = next(t for t in traces if t.info.trace_id == "tr-" + trace_export.trace_id(parent, 1, "inst-1").hex())
    assert one.info.state == "OK" and one.info.tags["mlflow.traceName"] == "task-1"
    spans = _spans(one)
    root = spans[0]
    assert root["root"] and root["type"] == "AGENT" and root["name"] == "task-1"
    assert root["inputs"] == {"question": "上个月住院多少人? (1)", "language": "zh"}
    assert root["outputs"] == {"answer": "1 人", "final_sql": "select 1", "correct": True}
    assert root["attributes"] == {"instance_id": "inst-1", "agent": "gold", "stop_reason": "final_answer"}
    assert (root["start"], root["end"]) == (1767225600 * 10**9, 1767225604 * 10**9)
    assert [s["type"] for s in spans[1:]] == ["CHAT_MODEL", "TOOL", "CHAT_MODEL", "TOOL", "CHAT_MODEL"]
    tool = spans[2]
    assert tool["inputs"] == {"arguments": {"table_name": "admissions"}} and tool["outputs"]["result"].startswith("pa")
    assert tool["attributes"]["ok"] == "True" and tool["end"] - tool["start"] == 12_250_000
    assert spans[1]["inputs"] == {"reasoning": "读取表结构"} and spans[1]["attributes"]["prompt_tokens"] == "1000"

    # the same spans as MLflow's span API writes (the path of a server without the OTLP route)
    with monkeypatch.context() as patched:
        patched.setattr(tracking, "_export_otlp", lambda *_: None)
        other = _log(tracking_uri, "span-api-run", TRAJECTORIES[:3])
    assert mlflow.MlflowClient(tracking_uri).get_run(other).data.tags[tracking.EXPORT_TAG] == "span api"
    by_api = next(t for t in _traces(tracking_uri, other) if _instances([t]) == ["inst-1"])
    assert _spans(by_api) == spans

    assert _log(tracking_uri, "bulk-run") == parent  # logged again (a retried task, a re-score)
    again = _traces(tracking_uri, parent)
    assert len(again) == N and sorted(_instances(again)) == sorted(_instances(traces))


def _refusing(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """The first request reaches the server; the ones after it are refused (503) or find it gone."""
    post = trace_export.OtlpExport._post
    calls = Counter[str]()

    def refuse(self: trace_export.OtlpExport, body: bytes) -> tuple[int, str]:
        calls["post"] += 1
        if calls["post"] == 1:
            return post(self, body)
        if how == "503":
            return 503, "Service Unavailable"
        self.tracking_uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there: connection refused
        return post(self, body)

    monkeypatch.setattr(trace_export.OtlpExport, "_post", refuse)
    monkeypatch.setattr(trace_export, "RETRY_WAIT_S", 0.0)


@server
@pytest.mark.parametrize("how", ["503", "gone"])
def test_a_refused_export_fails_tracking_saying_how_many_arrived_and_a_relog_completes_it(
    tracking_uri: str, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    run_id = f"refused-{how}"
    with monkeypatch.context() as patched:
        _refusing(patched, how)
        with pytest.raises(
            ServiceError, match=rf"took 100 of the {N} traces of run {run_id} before their export failed"
        ):
            _log(tracking_uri, run_id)
    parent = _log(tracking_uri, run_id)
    traces = _traces(tracking_uri, parent)
    assert len(traces) == N and len(set(_instances(traces))) == N


@server
def test_a_server_without_the_otlp_route_gets_the_traces_through_the_span_api(
    tracking_uri: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import mlflow

    monkeypatch.setattr(trace_export.OtlpExport, "_post", lambda *_: (404, "Not Found"))
    parent = _log(tracking_uri, "old-server", TRAJECTORIES[:5])
    assert _held(tracking_uri, parent) == 5
    assert mlflow.MlflowClient(tracking_uri).get_run(parent).data.tags[tracking.EXPORT_TAG] == "span api"
    assert "MLflow takes no OTLP span export (HTTP 404" in capsys.readouterr().err


@server
def test_a_short_count_fails_tracking_saying_held_of_expected(
    tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server answered every request but holds fewer traces for the run than were sent."""
    monkeypatch.setattr(tracking, "count_traces", lambda *_: 3)
    with pytest.raises(ServiceError, match=r"holds 3 of the 5 traces of run short: `evalpkg score short --track`"):
        _log(tracking_uri, "short", TRAJECTORIES[:5])


def test_requests_hold_at_most_the_traces_the_server_links_per_request() -> None:
    """Unit: batches of TRACES_PER_REQUEST, each trace's id fixed by run, place and instance."""
    sent: list[list[str]] = []
    export = trace_export.OtlpExport("http://127.0.0.1:1", "1", "run")
    export._post = lambda body: (200, "")  # type: ignore[method-assign]
    original = export._send

    def record(body: bytes, ids: list[str], first: bool = False) -> None:
        sent.append(ids)
        original(body, ids, first)

    export._send = record  # type: ignore[method-assign]
    export.start([(t, None) for t in TRAJECTORIES])
    export.wait()
    assert [len(ids) for ids in sent] == [100, 100, 50] and export.error is None
    assert sorted(export.sent) == sorted(i for ids in sent for i in ids)
    assert len(set(export.sent)) == N
    assert sent[0][1] == "tr-" + trace_export.trace_id("run", 1, "inst-1").hex()


@server
def test_tracking_cut_short_leaves_no_sender_behind_and_a_relog_logs_nothing_twice(tracking_uri: str) -> None:
    import threading

    def killed() -> None:  # Ctrl-C while the report is written: the traces are on their way
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _log(tracking_uri, "cut-short", artifacts_ready=killed)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("otlp-")]
    parent = _log(tracking_uri, "cut-short")
    traces = _traces(tracking_uri, parent)
    assert len(traces) == N and len(set(_instances(traces))) == N


def test_ctrl_c_in_the_first_request_ends_the_parent_and_a_relog_completes_it(
    tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first batch is sent while the Tracker is entered: interrupted there, the parent run must still be
    ended (else this process could start no other run) and marked FAILED."""
    import mlflow

    post = trace_export.OtlpExport._post

    def interrupted(self: trace_export.OtlpExport, body: bytes) -> tuple[int, str]:
        raise KeyboardInterrupt

    monkeypatch.setattr(trace_export.OtlpExport, "_post", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _log(tracking_uri, "first-request")
    assert mlflow.active_run() is None
    monkeypatch.setattr(trace_export.OtlpExport, "_post", post)
    parent = _log(tracking_uri, "first-request")
    assert len(_traces(tracking_uri, parent)) == N
    assert mlflow.MlflowClient(tracking_uri).get_run(parent).info.status == "FINISHED"


def test_a_run_made_by_an_airflow_task_is_tagged_with_its_dag_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalpkg.pipeline.tracking import orchestrator_tags

    for var in ("AIRFLOW_CTX_DAG_ID", "AIRFLOW_CTX_DAG_RUN_ID", "AIRFLOW_CTX_TASK_ID"):
        monkeypatch.delenv(var, raising=False)
    assert orchestrator_tags() == {}  # a run from the command line names no DAG
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "agent_eval")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "manual__2026-12-03T10:00:00+00:00")
    assert orchestrator_tags() == {
        "airflow.dag_id": "agent_eval",
        "airflow.run_id": "manual__2026-12-03T10:00:00+00:00",
    }
