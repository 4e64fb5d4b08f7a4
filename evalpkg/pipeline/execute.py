"""Stages 2 and 3, execute and record: a shard's instances run concurrently (enough requests in
flight to keep a batching server busy) over one model client and two small database pools shared
by all of them; each trajectory is recorded exactly once, so a killed shard re-runs only what is
missing."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack, closing
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from evalpkg.agent.executor import ReadOnlyExecutor
from evalpkg.agent.loop import Limits, Policy, run_dialogue, system_prompt
from evalpkg.agent.plan_tools import PLAN_TOOL_NAMES, PlanToolkit
from evalpkg.agent.policies import OpenAIPolicy, gold_policy, perturbation_policy
from evalpkg.agent.session import agent_url, load_shared
from evalpkg.agent.tools import STATE_TOOL, TOOL_NAMES, Shared, Toolkit, ToolOptions
from evalpkg.agent.trajectory import Trajectory
from evalpkg.agent.user_sim import ScriptedUser
from evalpkg.db import pool
from evalpkg.errors import ConfigError, DataError
from evalpkg.pipeline import store
from evalpkg.pipeline.config import RunConfig
from evalpkg.pipeline.plan import Instance
from evalpkg.settings import RESULTS_DB, Settings
from evalpkg.testset import release
from evalpkg.testset.models import Complexity, Language, Task

if TYPE_CHECKING:  # the openai SDK is imported only by runs that call a model
    from evalpkg.agent.model_client import ModelClient


@dataclass
class ShardReport:
    shard: int
    planned: int
    skipped: int  # recorded by an earlier attempt
    recorded: int
    seconds: float
    cache: dict[str, dict[str, int]]


def make_model_client(config: RunConfig) -> ModelClient | None:
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
    )


def make_policy(config: RunConfig, task: Task, language: Language, client: ModelClient | None) -> Policy:
    if config.agent == "gold":
        return gold_policy(task, language)
    if config.agent.startswith("perturb:"):
        return perturbation_policy(task, config.agent.split(":", 1)[1], language)
    if client is None:
        raise ConfigError("agent=openai needs the shard's model client")
    return OpenAIPolicy(
        client=client,
        model=config.model,
        temperature=config.temperature,
        seed=config.seed,
        native_tools=config.native_tools,
    )


def make_toolkit(
    config: RunConfig,
    shared: Shared,
    executor: ReadOnlyExecutor,
    task: Task,
    lang: Language,
    question: str,
    client: ModelClient | None = None,
) -> Toolkit:
    """The strategy's toolkit and toolset, with the configured simulated clinician."""
    user: Any = ScriptedUser(task.hidden_slots, lang)
    if config.user_simulator == "llm":
        from evalpkg.agent.llm_user import LLMUser

        if client is None:
            raise ConfigError("user_simulator llm needs the shard's model client")
        user = LLMUser(task.hidden_slots, lang, config.model, client, config.temperature)
    if config.strategy == "plan":
        return PlanToolkit(
            shared=shared,
            executor=executor,
            question=question,
            user=user,
            options=options(config),
            tool_names=PLAN_TOOL_NAMES,
        )
    names = (*TOOL_NAMES, STATE_TOOL) if config.toolset == "emr-v1+state" else TOOL_NAMES
    return Toolkit(
        shared=shared, executor=executor, question=question, user=user, options=options(config), tool_names=names
    )


def options(config: RunConfig) -> ToolOptions:
    return ToolOptions(
        time_confirmation=config.time_confirmation,
        supplementary_schema=config.supplementary_schema,
        schema_hint=config.schema_hint,
        schema_retrieval=config.schema_retrieval,
    )


def limits(config: RunConfig) -> Limits:
    return Limits(
        max_steps=config.max_steps,
        max_calls_per_tool=config.max_calls_per_tool,
        max_calls_total=config.max_calls_total,
        deadline_s=config.instance_timeout_s,
    )


def run_instance(
    config: RunConfig,
    shared: Shared,
    task: Task,
    inst: Instance,
    executor: ReadOnlyExecutor,
    client: ModelClient | None,
) -> Trajectory:
    """One dialogue with its own toolkit, simulated clinician and policy over the shard's shared pieces."""
    lang, level = Language(inst.language), Complexity(inst.complexity)
    question = task.question(lang, level)
    followups = tuple(t.user[lang] for t in task.turns[1:] if t.user and not task.hidden_slots)
    return run_dialogue(
        make_policy(config, task, lang, client),
        make_toolkit(config, shared, executor, task, lang, question, client),
        instance_id=inst.instance_id,
        task_id=task.id,
        language=inst.language,
        complexity=inst.complexity,
        question=question,
        followups=followups,
        limits=limits(config),
        system_prompt=system_prompt(config.prompt_version, tuple(config.disabled_prompt_rules)),
    )


def execute_shard(
    settings: Settings,
    run_id: str,
    shard: int,
    *,
    progress: Callable[[int, int], None] = lambda done, total: None,
    shared: Shared | None = None,
    endpoint: str | None = None,
    model: str | None = None,
) -> ShardReport:
    """`endpoint`/`model` override the plan's: each shard may start its own model worker."""
    t0 = time.perf_counter()
    config, testset_version, snapshot, instances = store.load_run(settings, run_id)
    if endpoint or model:
        config = config.model_copy(update={k: v for k, v in (("endpoint", endpoint), ("model", model)) if v})
    if not 0 <= shard < config.shards:
        raise ConfigError(f"--shard: {shard} is outside 0..{config.shards - 1}")
    tasks = release.load(settings.tasks_dir, testset_version).by_id()
    shared = shared or load_shared(settings)
    if shared.cache.snapshot_version != snapshot:
        raise DataError(
            f"run {run_id} was planned on snapshot {snapshot}, the eval DB is now "
            f"{shared.cache.snapshot_version}: start a new run"
        )
    mine = [i for i in instances if i.shard == shard]
    done = store.recorded_ids(settings, run_id, shard)
    todo = [i for i in mine if i.instance_id not in done]
    recorded = 0
    with ExitStack() as opened:  # closed in reverse order, also when opening one of them fails
        executor = opened.enter_context(
            closing(
                ReadOnlyExecutor(agent_url(settings), timeout_ms=config.sql_timeout_ms, pool_size=config.eval_db_pool)
            )
        )
        results = opened.enter_context(pool(settings.db_url(RESULTS_DB), config.results_db_pool, name="results-db"))
        client = make_model_client(config)
        if client is not None:
            opened.callback(client.close)

        def run_one(inst: Instance) -> bool:
            traj = run_instance(config, shared, tasks[inst.task_id], inst, executor, client)
            with results.connection() as conn:
                return store.record(conn, run_id, shard, traj)

        with ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix=f"shard{shard}") as workers:
            # a window of submitted instances, not all of them: memory does not grow with the shard's size
            pending = iter(todo)
            running = {workers.submit(run_one, i) for i in islice(pending, 2 * config.concurrency)}
            done_count = 0
            while running:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    recorded += fut.result()
                    done_count += 1
                    progress(done_count, len(todo))
                running |= {workers.submit(run_one, i) for i in islice(pending, len(finished))}
    store.export_jsonl(settings, run_id, shard)
    return ShardReport(
        shard, len(mine), len(mine) - len(todo), recorded, time.perf_counter() - t0, shared.cache.stats()
    )
