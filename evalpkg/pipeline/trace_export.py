"""Trajectories as MLflow traces in bulk: OTLP span exports (protobuf `ExportTraceServiceRequest`) to
the tracking server's `/v1/traces`, a hundred traces per request from two sender threads. MLflow's own
exporter spends a `start_trace` request per trace besides its span batches; here one request holds
every span of a hundred traces, stored by the server in one session, and its `x-mlflow-run-id`
header links them to the parent run (what `search_traces(run_id=...)` finds).

What a trace holds is `drafts`: the root AGENT span (question in, answer out) and a CHAT_MODEL span per
model step and a TOOL span per tool call under it, with their attributes and timestamps; the same drafts
feed MLflow's span API where the server has no OTLP route (`tracking._log_trace`).

A trace's id comes from the parent run, its place in the run and its instance: a request retried after
a lost answer, or a re-log after a cut-short export, stores the same traces again, never a second copy."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from evalpkg.agent.trajectory import Trajectory
from evalpkg.errors import EvalpkgError
from evalpkg.pipeline.score import InstanceScore

TRACES_PER_REQUEST = 100  # the server links at most 100 traces to a run per request (MAX_TRACE_LINKS_PER_REQUEST)
SENDERS = 2  # requests in flight: the server stores one batch while the next one is read
ATTEMPTS = 3  # per request, on a dropped connection, a timeout, 429 or 5xx
RETRY_WAIT_S = 1.0  # doubled per attempt
TIMEOUT_S = 120.0
NO_ROUTE = (404, 405, 501)  # a server before MLflow 3.4 (no OTLP route), or a store without span logging
TRACE_NAME_ATTRIBUTE = "mlflow.traceTag.mlflow.traceName"  # the server makes it the trace's name tag


@dataclass(frozen=True)
class SpanDraft:
    """One span as both exports write it; a time of None is "now" (a trajectory that lacks it)."""

    name: str
    kind: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    attributes: dict[str, str]
    start_ns: int | None
    end_ns: int | None


def _ns(stamp: str) -> int | None:
    try:
        return int(datetime.fromisoformat(stamp).timestamp() * 1e9)
    except ValueError:
        return None


def drafts(traj: Trajectory, score: InstanceScore | None) -> tuple[SpanDraft, list[SpanDraft]]:
    """The root span and its children, in the order they ran."""
    children: list[SpanDraft] = []
    for step in traj.steps:
        step_start = _ns(step.started_at)
        children.append(
            SpanDraft(
                name=f"model step {step.index}",
                kind="CHAT_MODEL",
                inputs={"reasoning": step.reasoning},
                outputs={"text": step.model_text, "parse_error": step.parse_error},
                attributes={"prompt_tokens": str(step.prompt_tokens), "completion_tokens": str(step.completion_tokens)},
                start_ns=step_start,
                end_ns=step_start + int(step.latency_ms * 1e6) if step_start else None,
            )
        )
        for call in step.tool_calls:
            start = _ns(call.started_at)
            children.append(
                SpanDraft(
                    name=call.name,
                    kind="TOOL",
                    inputs={"arguments": call.arguments},
                    outputs={"result": call.result[:4000]},
                    attributes={"ok": str(call.ok), "cached": str(call.cached), "result_sha256": call.result_sha256},
                    start_ns=start,
                    end_ns=start + int(call.elapsed_ms * 1e6) if start else None,
                )
            )
    state = traj.final_state()
    outputs = (
        {"answer": traj.final_answer, "final_sql": traj.final_sql, "correct": score.correct if score else None}
        | (  # the dialogue state where the run kept one, and its score against the hidden slots
            {"state": state.model_dump(mode="json"), "slot_accuracy": score.slot_accuracy if score else None}
            if state is not None
            else {}
        )
        | (  # a dialogue with follow-ups: each turn's answer and outcome
            {
                "turn_answers": [a.model_dump() for a in traj.turn_answers],
                "turn_correct": score.turn_correct if score else None,
            }
            if traj.turn_answers
            else {}
        )
    )
    root = SpanDraft(
        name=traj.task_id,
        kind="AGENT",
        inputs={"question": traj.question, "language": traj.language},
        outputs=outputs,
        attributes={"instance_id": traj.instance_id, "agent": traj.agent, "stop_reason": traj.stop_reason},
        start_ns=_ns(traj.started_at),
        end_ns=_ns(traj.ended_at),
    )
    return root, children


def _set(pb: Any, value: Any) -> None:
    """A value as an OTLP AnyValue: the server decodes it and stores it as JSON, as MLflow's span API does."""
    if value is None:
        return  # an unset AnyValue reads back as None
    if isinstance(value, bool):
        pb.bool_value = value
    elif isinstance(value, int) and -(2**63) <= value < 2**63:
        pb.int_value = value
    elif isinstance(value, float):
        pb.double_value = value
    elif isinstance(value, str):
        pb.string_value = value.encode("utf-8", errors="replace").decode("utf-8")  # lone surrogates
    elif isinstance(value, list | tuple):
        pb.array_value.SetInParent()  # present even when empty
        for item in value:
            _set(pb.array_value.values.add(), item)
    elif isinstance(value, Mapping):
        pb.kvlist_value.SetInParent()
        for key, item in value.items():
            kv = pb.kvlist_value.values.add()
            kv.key = str(key)
            _set(kv.value, item)
    else:
        _set(pb, str(value))


def trace_id(mlflow_run_id: str, position: int, instance_id: str) -> bytes:
    return hashlib.blake2b(f"{mlflow_run_id}\0{position}\0{instance_id}".encode(), digest_size=16).digest()


def _add_trace(scope: Any, tid: bytes, traj: Trajectory, score: InstanceScore | None) -> None:
    from opentelemetry.proto.trace.v1.trace_pb2 import Status

    root, children = drafts(traj, score)
    now = time.time_ns()
    root_id = hashlib.blake2b(tid + b"\0root", digest_size=8).digest()
    for n, draft in enumerate([root, *children]):
        span = scope.spans.add()
        span.trace_id = tid
        if n == 0:
            span.span_id = root_id
        else:
            span.span_id = hashlib.blake2b(tid + n.to_bytes(4, "big"), digest_size=8).digest()
            span.parent_span_id = root_id
        span.name = draft.name
        span.start_time_unix_nano = draft.start_ns or now
        span.end_time_unix_nano = draft.end_ns or now
        span.status.code = Status.STATUS_CODE_OK
        attributes: dict[str, Any] = {
            "mlflow.spanType": draft.kind,
            "mlflow.spanInputs": draft.inputs,
            **draft.attributes,
            "mlflow.spanOutputs": draft.outputs,
        }
        if n == 0:
            attributes[TRACE_NAME_ATTRIBUTE] = draft.name
        for key, value in attributes.items():
            kv = span.attributes.add()
            kv.key = key
            _set(kv.value, value)


def request_body(
    mlflow_run_id: str, batch: Iterable[tuple[int, Trajectory, InstanceScore | None]]
) -> tuple[bytes, list[str]]:
    """One OTLP request for a batch of (position, trajectory, score), and the MLflow ids of its traces."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    kv = resource.resource.attributes.add()
    kv.key = "service.name"
    kv.value.string_value = "evalpkg"
    scope = resource.scope_spans.add()
    scope.scope.name = "evalpkg.pipeline.tracking"
    ids = []
    for position, traj, score in batch:
        tid = trace_id(mlflow_run_id, position, traj.instance_id)
        _add_trace(scope, tid, traj, score)
        ids.append("tr-" + tid.hex())
    return request.SerializeToString(), ids


class NoOtlpRoute(EvalpkgError):
    """The tracking server does not take OTLP span exports (an older MLflow, or a store without spans)."""


@dataclass
class OtlpExport:
    """Sends batches of traces while the caller goes on; `wait` waits for them, then `sent` and `error`
    say what arrived. `start` sends the first batch itself, so NoOtlpRoute (the server lacks the route)
    reaches the caller before anything else went; a feeder thread builds the other batches for the
    sender threads. After a batch fails for good, the batches not yet sent are not sent."""

    tracking_uri: str
    experiment_id: str
    mlflow_run_id: str
    sent: list[str] = field(default_factory=list)  # MLflow ids of the traces the server acknowledged
    error: str | None = None
    _pool: ThreadPoolExecutor | None = None
    _feeder: threading.Thread | None = None
    _futures: list[Future[None]] = field(default_factory=list)
    _slots: threading.Semaphore = field(default_factory=lambda: threading.BoundedSemaphore(2 * SENDERS))
    _stopped: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _local: threading.local = field(default_factory=threading.local)

    def _connection(self) -> tuple[str, dict[str, str], bool | str]:
        """Where requests go, their headers (the experiment, the run, credentials where set) and TLS
        verification, as MLflow's client has them."""
        from mlflow.environment_variables import MLFLOW_TRACKING_INSECURE_TLS, MLFLOW_TRACKING_SERVER_CERT_PATH
        from mlflow.tracing.utils.otlp import MLFLOW_RUN_ID_HEADER, OTLP_TRACES_PATH, build_otlp_headers

        headers = build_otlp_headers(self.experiment_id) | {
            MLFLOW_RUN_ID_HEADER: self.mlflow_run_id,
            "Content-Type": "application/x-protobuf",
        }
        insecure: Any = MLFLOW_TRACKING_INSECURE_TLS  # (their `get` is untyped)
        cert_path: Any = MLFLOW_TRACKING_SERVER_CERT_PATH
        verify: bool | str = False if insecure.get() else str(cert_path.get() or "") or True
        return self.tracking_uri.rstrip("/") + OTLP_TRACES_PATH, headers, verify

    def _post(self, body: bytes) -> tuple[int, str]:
        """(status, the reply's first line); status 0 where no reply came."""
        import requests

        url, headers, verify = self._connection()
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        try:
            reply = session.post(url, data=body, headers=headers, verify=verify, timeout=TIMEOUT_S)
        except requests.RequestException as exc:
            return 0, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        return reply.status_code, (reply.text.splitlines() or [""])[0][:200]

    def _send(self, body: bytes, ids: list[str], first: bool = False) -> None:
        for attempt in range(ATTEMPTS):
            if self.error is not None:
                return  # an earlier batch failed for good: the rest waits for the re-log
            status, text = self._post(body)
            if 200 <= status < 300:
                with self._lock:
                    self.sent.extend(ids)
                return
            if first and status in NO_ROUTE:
                raise NoOtlpRoute(f"HTTP {status} from {self.tracking_uri}: {text}")
            retried = status in (0, 429) or status >= 500
            if not retried or attempt == ATTEMPTS - 1:
                with self._lock:
                    self.error = self.error or (f"HTTP {status}: {text}" if status else text)
                return
            time.sleep(RETRY_WAIT_S * 2**attempt)

    def start(self, items: list[tuple[Trajectory, InstanceScore | None]]) -> None:
        batches = [
            [(p, *items[p]) for p in range(first, min(first + TRACES_PER_REQUEST, len(items)))]
            for first in range(0, len(items), TRACES_PER_REQUEST)
        ]
        if not batches:
            return
        self._send(*request_body(self.mlflow_run_id, batches[0]), first=True)
        self._pool = ThreadPoolExecutor(SENDERS, thread_name_prefix="otlp-export")
        self._feeder = threading.Thread(target=self._feed, args=(batches[1:],), name="otlp-feed", daemon=True)
        self._feeder.start()

    def _feed(self, batches: list[list[tuple[int, Trajectory, InstanceScore | None]]]) -> None:
        assert self._pool is not None
        for batch in batches:
            self._slots.acquire()  # a few requests in flight, not every trace's bytes at once
            if self._stopped.is_set() or self.error is not None:
                self._slots.release()
                return
            future = self._pool.submit(self._send, *request_body(self.mlflow_run_id, batch))
            future.add_done_callback(lambda _: self._slots.release())
            self._futures.append(future)

    def wait(self) -> None:
        if self._feeder is not None:
            self._feeder.join()
        for future in self._futures:
            future.result()
        self.close()

    def close(self) -> None:
        """Stops sending: a request in flight ends, the ones not yet sent are dropped."""
        self._stopped.set()
        if self._feeder is not None:
            self._feeder.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def chunks(items: list[str], size: int = TRACES_PER_REQUEST) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
