"""A scripted OpenAI-compatible endpoint on 127.0.0.1 for tests: it fails the first requests with
the given HTTP statuses, then answers a dialogue with a tool call (execute_sql, plus ask_clarify if
asked to, or as a plan agent submit_plan with the plan given for the question) and, once a tool result
is there, a final answer; an LLM-played clinician gets a short
reply. It counts requests, the most in flight at once, and the client connections it saw."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CLINICIAN_MARKERS = ("You are a clinician", "你是一位临床医生")


class FakeEndpoint:
    def __init__(
        self,
        failures: list[int] | None = None,
        delay_s: float = 0.0,
        clarify: bool = False,
        plans: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.plans = plans  # question -> the plan to submit (a plan agent); None: execute_sql
        self.failures = list(failures or [])
        self.delay_s = delay_s
        self.clarify = clarify
        self.requests = self.in_flight = self.peak = 0
        self.connections: set[int] = set()  # client ports
        self.max_tokens: list[int | None] = []  # what each request asked for
        self.lock = threading.Lock()

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages", [])
        if any(marker in str(messages[0].get("content", "")) for marker in CLINICIAN_MARKERS):
            return {"role": "assistant", "content": "last 3 months"}
        if any(m.get("role") == "tool" for m in messages):
            return {"role": "assistant", "content": "There are 12 departments."}
        calls: list[tuple[str, dict[str, Any]]] = [("execute_sql", {"sql": "select count(*) as n from emr.dict_dept"})]
        if self.plans is not None:
            question = next(str(m.get("content")) for m in messages if m.get("role") == "user")
            plan = self.plans.get(question)
            calls = [("submit_plan", {"plan": plan})] if plan else []
            if not calls:
                return {
                    "role": "assistant",
                    "content": "数据库中没有这项数据，无法回答。 The database does not hold this data.",
                }
        if self.clarify:
            calls.insert(0, ("ask_clarify", {"question": "Which time range?"}))
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"call-{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, (n, a) in enumerate(calls)
            ],
        }

    def handle(self, handler: BaseHTTPRequestHandler) -> tuple[int, dict[str, Any]]:
        body = json.loads(handler.rfile.read(int(handler.headers.get("content-length", 0))))
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.connections.add(handler.client_address[1])
            self.max_tokens.append(body.get("max_tokens"))
            status = self.failures.pop(0) if self.failures else 200
        try:
            time.sleep(self.delay_s)
            if status != 200:
                return status, {"error": {"message": f"scripted {status}", "type": "server_error"}}
            message = self.reply(body)
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            return 200, {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "m"),
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        finally:
            with self.lock:
                self.in_flight -= 1


def send_json(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
    """One JSON response on a kept-alive connection."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@contextmanager
def serving(endpoint: FakeEndpoint) -> Iterator[str]:
    """The endpoint's base URL while it runs."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse shows

        def do_POST(self) -> None:
            send_json(self, *endpoint.handle(self))

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
