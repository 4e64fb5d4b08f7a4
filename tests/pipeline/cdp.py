"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: commands on
the browser's fd 3, replies on fd 4, each message JSON ended by a NUL), so no websocket client and no
port are needed."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any


class Browser:
    def __init__(self, profile: Path, timeout_s: float = 30.0) -> None:
        binary = shutil.which("chromium") or shutil.which("chromium-browser")
        if binary is None:
            raise FileNotFoundError("chromium is not on PATH")
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()
        flags = "--headless --no-sandbox --disable-gpu --no-first-run --disable-extensions --remote-debugging-pipe"
        # the shell moves the pipes to the fds the protocol expects, then becomes the browser
        script = f'exec 3<&{commands_read} 4>&{replies_write}; exec "$0" {flags} --user-data-dir="$1" about:blank'
        self.process = subprocess.Popen(
            ["bash", "-c", script, binary, str(profile)],
            pass_fds=(commands_read, replies_write),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(replies_write)
        self.timeout_s = timeout_s
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""

    def __enter__(self) -> Browser:
        target = self.send("Target.createTarget", url="about:blank", session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True, session=False)["sessionId"]
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        try:
            self.send("Browser.close", session=False)
            self.process.wait(timeout=10)
        except (OSError, TimeoutError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            os.close(self._commands)
            os.close(self._replies)

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise TimeoutError("no reply from chromium")
            data = os.read(self._replies, 1 << 20)
            if not data:
                raise OSError("chromium closed its pipe")
            self._buffer += data
        text, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(text)
        return message

    def send(self, method: str, session: bool = True, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            command["sessionId"] = self.session
        os.write(self._commands, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            message = self._message(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def wait_for(self, event: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while True:
            for i, message in enumerate(self.events):
                if message.get("method") == event:
                    return self.events.pop(i)
            self.events.append(self._message(deadline))

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page, a promise awaited."""
        reply = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")
