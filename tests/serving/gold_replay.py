"""A gold-replay model behind an OpenAI-compatible server, for tests without a GPU: each dialogue is
answered the way the gold agent would answer it (evalpkg.agent.policies.gold_policy), the task found
by its question and, where tasks share a question, by the calls made and the clinician's answers so
far; a run through it must score 100%, like the gold agent. Built on tests/agent/fake_endpoint's
FakeEndpoint (completion bodies, counters, the LLM-clinician reply), served with the routes a vLLM
server has: /health, /version, /v1/models and /v1/chat/completions. `main` is the stand-in `vllm`
command (tests/serving/fake_vllm)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from evalpkg.agent.policies import gold_policy
from evalpkg.agent.user_sim import ScriptedUser
from evalpkg.settings import get_settings
from evalpkg.testset import release
from evalpkg.testset.models import Language, Task
from tests.agent.fake_endpoint import CLINICIAN_MARKERS, FakeEndpoint, send_json

VERSION = "0.0.0+gold-replay"
CRASH_LINE = "RuntimeError: CUDA error: an illegal memory access was encountered"


def _arguments(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class GoldReplay(FakeEndpoint):
    def __init__(
        self,
        tasks: list[Task],
        *,
        delay_s: float = 0.0,
        crash_after: int | None = None,
        stall_after: int | None = None,
        stall_s: float = 0.0,
    ) -> None:
        super().__init__(delay_s=delay_s)
        self.crash_after = crash_after  # the process dies on the next chat request after this many
        # like llama.cpp generating a long answer: the next chat request after this many takes stall_s,
        # and no health route answers meanwhile
        self.stall_after = stall_after
        self.stall_s = stall_s
        self.busy_until = 0.0
        self.by_question: dict[str, list[tuple[Task, Language]]] = {}
        for task in tasks:
            for variant in task.variants:
                self.by_question.setdefault(variant.text, []).append((task, variant.language))

    def handle(self, handler: BaseHTTPRequestHandler) -> tuple[int, dict[str, Any]]:
        if self.crash_after is not None and self.requests >= self.crash_after:
            print(CRASH_LINE, flush=True)
            os._exit(1)
        if self.stall_after is not None and self.requests == self.stall_after:
            self.stall_after = None
            self.busy_until = time.monotonic() + self.stall_s
            print(f"INFO: generating a long answer for {self.stall_s:.0f}s; health routes wait", flush=True)
            time.sleep(self.stall_s)
        return super().handle(handler)

    def wait_while_busy(self) -> None:
        while (left := self.busy_until - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        messages: list[dict[str, Any]] = request.get("messages", [])
        if any(marker in str(messages[0].get("content", "")) for marker in CLINICIAN_MARKERS):
            return super().reply(request)
        question = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        steps = [m for m in messages if m.get("role") == "assistant" and m.get("tool_calls")]
        calls = [
            (c["id"], c["function"]["name"], _arguments(c["function"]["arguments"]))
            for m in steps
            for c in m["tool_calls"]
        ]
        made = [(name, args) for _, name, args in calls]
        asked = {cid: str(args.get("question", "")) for cid, name, args in calls if name == "ask_clarify"}
        answers = [  # (the clinician's question, the answer the tool returned; None once trimmed)
            (asked[m["tool_call_id"]], _arguments(m.get("content")).get("answer"))
            for m in messages
            if m.get("role") == "tool" and m.get("tool_call_id") in asked
        ]
        for task, language in self.by_question.get(question, []):
            policy = gold_policy(task, language)
            planned = [call for step in policy.script for call in step]
            if planned[: len(made)] != made:
                continue
            user = ScriptedUser(task.hidden_slots, language)
            if any(answer is not None and user.answer(asked) != answer for asked, answer in answers):
                continue
            policy.position = len(steps)
            turn = policy.next(messages, request.get("tools", []))
            if not turn.tool_calls:
                return {"role": "assistant", "content": turn.text}
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
                    }
                    for cid, name, args in turn.tool_calls
                ],
            }
        return {"role": "assistant", "content": "(gold replay: no task has this dialogue)"}


def serve(endpoint: FakeEndpoint, host: str, port: int, served_name: str, healthy: bool = True) -> None:
    """Serve until killed, with vLLM's routes."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: Any) -> None:
            send_json(self, status, body)

        def do_GET(self) -> None:
            if isinstance(endpoint, GoldReplay):
                endpoint.wait_while_busy()
            if not healthy:
                self._send(503, {"error": "loading"})
            elif self.path == "/health":
                self._send(200, {})
            elif self.path == "/version":
                self._send(200, {"version": VERSION})
            elif self.path == "/v1/models":
                self._send(
                    200, {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "vllm"}]}
                )
            else:
                self._send(404, {"error": self.path})

        def do_POST(self) -> None:
            if self.path != "/v1/chat/completions" or not healthy:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self._send(404 if healthy else 503, {"error": self.path})
                return
            self._send(*endpoint.handle(self))

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    print(f"INFO: Uvicorn running on http://{host}:{port}", flush=True)
    server.serve_forever()


def main(argv: list[str]) -> int:
    """`vllm --version` and `vllm serve MODEL --port P [--host H] [--served-model-name N] [...]`; the
    environment scripts failures: FAKE_VLLM_NEVER_HEALTHY=1, FAKE_VLLM_CRASH_AFTER=N (chat requests),
    FAKE_VLLM_IGNORE_SIGTERM=1, FAKE_VLLM_DELAY_S (seconds per chat request), FAKE_VLLM_STALL_AFTER=N
    with FAKE_VLLM_STALL_S=S (the chat request after N takes S seconds, and health routes wait for it)."""
    if argv[:1] == ["--version"]:
        print(VERSION)
        return 0
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name")
    args, rest = parser.parse_known_args(argv)
    print(f"INFO: vllm serve (gold-replay stand-in) args: {argv}", flush=True)
    if os.environ.get("FAKE_VLLM_IGNORE_SIGTERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if Path(args.model).is_absolute() and not (Path(args.model) / "config.json").is_file():
        print(f"ValueError: {args.model} is not a model directory (no config.json)", flush=True)
        return 1
    settings = get_settings()
    tasks = release.load(settings.tasks_dir, os.environ.get("FAKE_VLLM_TESTSET")).tasks
    print(f"INFO: loaded {len(tasks)} tasks to replay; ignoring {len(rest)} engine options", flush=True)
    crash, stall = os.environ.get("FAKE_VLLM_CRASH_AFTER"), os.environ.get("FAKE_VLLM_STALL_AFTER")
    endpoint = GoldReplay(
        tasks,
        delay_s=float(os.environ.get("FAKE_VLLM_DELAY_S", "0")),
        crash_after=int(crash) if crash else None,
        stall_after=int(stall) if stall else None,
        stall_s=float(os.environ.get("FAKE_VLLM_STALL_S", "0")),
    )
    if os.environ.get("FAKE_VLLM_NEVER_HEALTHY"):
        print("INFO: loading weights ... (this stand-in never finishes)", flush=True)
    serve(
        endpoint,
        args.host,
        args.port,
        args.served_model_name or args.model,
        not os.environ.get("FAKE_VLLM_NEVER_HEALTHY"),
    )
    return 0
