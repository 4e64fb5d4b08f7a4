"""The run configuration: logged verbatim, and the thing that makes two runs comparable."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evalpkg.testset.models import Complexity, Language

RUN_CONFIG_FORMAT_VERSION = 1
THROUGHPUT_FIELDS = ("max_in_flight", "eval_db_pool", "results_db_pool")
PERTURBATIONS = ("wrong_time_field", "dropped_null_handling", "wrong_column", "extra_calls")


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1] = 1
    name: str = "eval"
    agent: str = "gold"  # gold | openai | perturb:<kind>
    model: str = "gold-replay"
    endpoint: str | None = None  # OpenAI-compatible base URL for agent=openai
    api_key: str = Field(default="EMPTY", exclude=True)  # never logged
    native_tools: bool = True
    quantization: str = "none"
    strategy: Literal["react", "plan"] = "react"  # plan: catalog functions + compiled plan objects
    toolset: Literal["emr-v1", "emr-v1+state"] = "emr-v1"  # +state: the update_state dialogue-state tool
    prompt_version: str = "react_v1"
    disabled_prompt_rules: list[int] = []  # ablations: drop numbered rules from the system prompt
    user_simulator: Literal["scripted", "llm"] = "scripted"
    testset_version: str | None = None  # default: latest release
    languages: list[Language] = [Language.zh, Language.en]
    complexities: list[Complexity] = [Complexity.plain]
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

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: str) -> str:
        if value in ("gold", "openai") or (value.startswith("perturb:") and value[8:] in PERTURBATIONS):
            return value
        raise ValueError(f"must be gold, openai or perturb:<{'|'.join(PERTURBATIONS)}>, got {value!r}")

    @model_validator(mode="after")
    def _rules_across_fields(self) -> RunConfig:
        """Rules across fields, each message naming the fields: a run is checked whole before it is planned."""
        if self.agent == "openai" and not self.endpoint:
            raise ValueError("agent openai needs an endpoint (--endpoint, an OpenAI-compatible base URL)")
        if self.strategy == "plan" and self.agent != "openai":
            raise ValueError("strategy plan needs agent openai: the scripted agents replay SQL")
        if self.strategy == "plan" and self.prompt_version == "react_v1":
            self.prompt_version = "plan_v1"
        if self.user_simulator == "llm" and self.agent != "openai":
            raise ValueError("user_simulator llm needs agent openai (it uses the same endpoint)")
        return self

    def fingerprint(self) -> str:
        """What makes results comparable, without the name, sharding or concurrency."""
        data = self.model_dump(mode="json", exclude={"name", "shards", "concurrency", "api_key", *THROUGHPUT_FIELDS})
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]
