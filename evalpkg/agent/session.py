"""Wiring an instance from the run configuration, in one place for runs and tests alike: the shard's
shared catalog, index and cache, its model client and read-only executor; per instance a toolkit
(strategy, toolset, options), a simulated clinician, a policy and the dialogue limits."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from evalpkg.agent.cache import ToolCache
from evalpkg.agent.loop import Limits, Policy
from evalpkg.agent.plan_tools import PLAN_TOOL_NAMES, PlanToolkit
from evalpkg.agent.policies import OpenAIPolicy, gold_policy, perturbation_policy
from evalpkg.agent.schema import Catalog, SchemaIndex
from evalpkg.agent.state_plan import DROPPED_SLOT, with_state
from evalpkg.agent.tools import STATE_TOOL, TOOL_NAMES, Shared, Toolkit, ToolOptions
from evalpkg.agent.user_sim import Clinician, ScriptedUser
from evalpkg.errors import ConfigError
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.sql.executor import ReadOnlyExecutor
from evalpkg.sql.gold import agent_connection, snapshot_version
from evalpkg.testset.models import Language, Task

if TYPE_CHECKING:  # the openai SDK is imported only by runs that call a model
    from evalpkg.agent.model_client import ModelClient


def load_shared(settings: Settings) -> Shared:
    with agent_connection(settings) as conn:
        catalog = Catalog.load(conn)
        with conn.transaction():
            cur = conn.execute("select * from meta.data_dictionary order by table_name, column_name")
            names = [d.name for d in cur.description or []]
            dictionary = [dict(zip(names, (v or "" for v in row), strict=True)) for row in cur.fetchall()]
            examples = [
                {"question": q, "question_en": qe or "", "sql": s}
                for q, qe, s in conn.execute(
                    "select question, question_en, sql_text from meta.sql_examples order by example_id"
                )
            ]
        snap = snapshot_version(conn)
    return Shared(catalog, SchemaIndex(catalog), ToolCache(snap), dictionary, examples)


def build_executor(settings: Settings, config: RunConfig) -> ReadOnlyExecutor:
    """The shard's read-only executor: a small session pool shared by every dialogue."""
    return ReadOnlyExecutor(
        settings.agent_url(),
        timeout_ms=config.sql_timeout_ms,
        max_bytes=config.max_result_bytes,
        max_row_bytes=config.max_row_bytes,
        pool_size=config.eval_db_pool,
    )


def build_model_client(config: RunConfig) -> ModelClient | None:
    """The shard's one client for its endpoint, shared by every dialogue and the LLM-played clinician."""
    if config.agent != "openai":
        return None
    if not config.endpoint:
        raise ConfigError("agent=openai needs --endpoint (an OpenAI-compatible base URL)")
    from evalpkg.agent.model_client import ModelClient

    return ModelClient(
        config.endpoint,
        config.api_key,
        timeout_s=config.instance_timeout_s,
        max_in_flight=config.max_in_flight or config.concurrency,
        max_tokens=config.max_tokens,
    )


def build_policy(config: RunConfig, task: Task, language: Language, client: ModelClient | None) -> Policy:
    """The instance's policy, built as its dialogue starts (the model's calls end by the dialogue's deadline)."""
    if config.agent == "gold" or config.agent.startswith("perturb:"):
        kind = config.agent.removeprefix("perturb:")
        scripted = (
            gold_policy(task, language, config.strategy)
            if config.agent == "gold"
            else perturbation_policy(task, kind, language, config.strategy)
        )
        if config.toolset == "emr-v1+state":  # the reference agents keep the dialogue state too
            scripted.script = with_state(task, scripted.script, DROPPED_SLOT if kind == "dropped_slot" else None)
        return scripted
    if client is None:
        raise ConfigError("agent=openai needs the shard's model client")
    return OpenAIPolicy(
        client=client,
        model=config.model,
        temperature=config.temperature,
        seed=config.seed,
        native_tools=config.native_tools,
        deadline=time.monotonic() + config.instance_timeout_s,
    )


def build_clinician(config: RunConfig, task: Task, language: Language, client: ModelClient | None) -> Clinician:
    if config.user_simulator == "scripted":
        return ScriptedUser(task.hidden_slots, language)
    from evalpkg.agent.llm_user import LLMUser

    if client is None:
        raise ConfigError("user_simulator llm needs the shard's model client")
    return LLMUser(
        task.hidden_slots,
        language,
        config.model,
        client,
        config.temperature,
        deadline=time.monotonic() + config.instance_timeout_s,
    )


def build_toolkit(
    config: RunConfig,
    shared: Shared,
    executor: ReadOnlyExecutor,
    task: Task,
    language: Language,
    question: str,
    client: ModelClient | None = None,
) -> Toolkit:
    """The strategy's toolkit and toolset, with the configured simulated clinician."""
    kind: type[Toolkit] = Toolkit
    names = TOOL_NAMES
    if config.strategy == "plan":
        kind, names = PlanToolkit, PLAN_TOOL_NAMES
    if config.toolset == "emr-v1+state":
        names = (*names, STATE_TOOL)
    return kind(
        shared=shared,
        executor=executor,
        question=question,
        user=build_clinician(config, task, language, client),
        options=tool_options(config),
        tool_names=names,
        language=language,
    )


def tool_options(config: RunConfig) -> ToolOptions:
    return ToolOptions(
        time_confirmation=config.time_confirmation,
        supplementary_schema=config.supplementary_schema,
        schema_hint=config.schema_hint,
        schema_retrieval=config.schema_retrieval,
    )


def build_limits(config: RunConfig) -> Limits:
    return Limits(
        max_steps=config.max_steps,
        max_calls_per_tool=config.max_calls_per_tool,
        max_calls_total=config.max_calls_total,
        deadline_s=config.instance_timeout_s,
    )
