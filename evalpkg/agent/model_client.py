"""One client per shard for an OpenAI-compatible endpoint, shared by every dialogue of the shard
(the agent and the LLM-played clinician): one SSL context, one keep-alive connection pool sized to
the requests in flight, an in-flight limit for the endpoint, and retries with backoff that the
caller records on the trajectory. Every request carries a `max_tokens` bound and ends by the caller's
deadline, so that no call outlives the dialogue that made it."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import httpx2  # the HTTP client package the openai SDK is built on
import openai
from openai.types.chat import ChatCompletion

from evalpkg.agent.trajectory import RetryRecord
from evalpkg.runconfig import DEFAULT_MAX_TOKENS

MAX_RETRIES = 3
BACKOFF_S = 0.5  # doubled on each retry, with jitter so a burst of 429s does not return in step
MAX_BACKOFF_S = 8.0
MIN_CALL_TIMEOUT_S = 1.0  # a call made just before its deadline still gets this long


def retryable(exc: Exception) -> bool:
    """Rate limits, server errors and dropped connections; a timed-out call has spent its budget."""
    if isinstance(exc, openai.APITimeoutError):
        return False
    if isinstance(exc, openai.APIConnectionError):
        return True
    return isinstance(exc, openai.APIStatusError) and (exc.status_code in (408, 409, 429) or exc.status_code >= 500)


def _retry_after(exc: Exception) -> float:
    response = getattr(exc, "response", None)
    try:
        return float(response.headers.get("retry-after", 0)) if response is not None else 0.0
    except ValueError:
        return 0.0


class ModelClient:
    def __init__(
        self,
        base_url: str,
        api_key: str = "EMPTY",
        *,
        timeout_s: float = 120.0,
        max_in_flight: int = 4,
        max_retries: int = MAX_RETRIES,
        backoff_s: float = BACKOFF_S,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        limits = httpx2.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
        self._openai = openai.OpenAI(
            base_url=base_url,
            api_key=api_key,
            timeout=timeout_s,
            max_retries=0,  # retried here, so that each retry is recorded
            http_client=openai.DefaultHttpxClient(limits=limits),
        )
        self._in_flight = threading.BoundedSemaphore(max_in_flight)

    def chat(self, retries: list[RetryRecord], *, deadline: float | None = None, **request: Any) -> Any:
        """A chat completion bounded by the client's max_tokens (unless the request sets its own) and
        ended by `deadline` (a time.monotonic() instant) at the latest; every failed attempt that is
        tried again is appended to `retries`."""
        request.setdefault("max_tokens", self.max_tokens)
        attempt = 0
        while True:
            attempt += 1
            timeout = self.timeout_s
            if deadline is not None:
                timeout = max(MIN_CALL_TIMEOUT_S, min(timeout, deadline - time.monotonic()))
            try:
                with self._in_flight:
                    # The request is already in the API's shape; the typed create() would walk every
                    # message and tool schema again against its TypedDicts, about half the CPU of a call.
                    return self._openai.post(
                        "/chat/completions", body=request, cast_to=ChatCompletion, options={"timeout": timeout}
                    )
            except openai.APIError as exc:
                if attempt > self.max_retries or not retryable(exc):
                    raise
                backoff = min(MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
                wait = min(MAX_BACKOFF_S, max(backoff, _retry_after(exc)))
                if deadline is not None and time.monotonic() + wait >= deadline:
                    raise  # no time left for another attempt
                retries.append(RetryRecord(attempt=attempt, error=f"{type(exc).__name__}: {exc}"[:300], wait_s=wait))
                time.sleep(wait)

    def close(self) -> None:
        self._openai.close()
