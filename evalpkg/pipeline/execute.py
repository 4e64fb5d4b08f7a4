"""Stages 2 and 3, execute and record: a shard's instances run concurrently (enough requests in
flight to keep a batching server busy); each trajectory is recorded exactly once, so a killed
shard re-runs only what is missing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import psycopg

from evalpkg.agent.executor import ReadOnlyExecutor
from evalpkg.agent.loop import Limits, Policy, run_dialogue, system_prompt
from evalpkg.agent.plan_tools import PLAN_TOOL_NAMES, PlanToolkit
from evalpkg.agent.policies import OpenAIPolicy, gold_policy, perturbation_policy
from evalpkg.agent.session import agent_url, load_shared
from evalpkg.agent.tools import STATE_TOOL, TOOL_NAMES, Shared, Toolkit, ToolOptions
from evalpkg.agent.user_sim import ScriptedUser
from evalpkg.errors import ConfigError, DataError
from evalpkg.pipeline import store
from evalpkg.pipeline.config import RunConfig
from evalpkg.pipeline.plan import Instance
from evalpkg.settings import RESULTS_DB, Settings
from evalpkg.testset import release
from evalpkg.testset.models import Complexity, Language, Task


@dataclass
class ShardReport:
    shard: int
    planned: int
    skipped: int  # recorded by an earlier attempt
    recorded: int
    seconds: float
    cache: dict[str, dict[str, int]]


def make_policy(config: RunConfig, task: Task, language: Language) -> Policy:
    if config.agent == "gold":
        return gold_policy(task, language)
    if config.agent.startswith("perturb:"):
        return perturbation_policy(task, config.agent.split(":", 1)[1], language)
    if not config.endpoint:
        raise ConfigError("agent=openai needs --endpoint (an OpenAI-compatible base URL)")
    return OpenAIPolicy(
        model=config.model,
        base_url=config.endpoint,
        api_key=config.api_key,
        temperature=config.temperature,
        seed=config.seed,
        native_tools=config.native_tools,
        timeout_s=config.instance_timeout_s,
    )


def make_toolkit(
    config: RunConfig, shared: Shared, executor: ReadOnlyExecutor, task: Task, lang: Language, question: str
) -> Toolkit:
    """The strategy's toolkit and toolset, with the configured simulated clinician."""
    user: Any = ScriptedUser(task.hidden_slots, lang)
    if config.user_simulator == "llm":
        from openai import OpenAI

        from evalpkg.agent.llm_user import LLMUser

        client = OpenAI(base_url=config.endpoint, api_key=config.api_key, timeout=config.instance_timeout_s)
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


class _Worker(threading.local):
    """Each thread gets its own eval DB session and results DB connection."""

    executor: ReadOnlyExecutor | None = None
    results: psycopg.Connection | None = None


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
    worker = _Worker()
    opened: list[tuple[ReadOnlyExecutor, psycopg.Connection]] = []
    lock = threading.Lock()

    def run_one(inst: Instance) -> bool:
        if worker.executor is None or worker.results is None:
            worker.executor = ReadOnlyExecutor(agent_url(settings), timeout_ms=config.sql_timeout_ms)
            worker.results = psycopg.connect(settings.db_url(RESULTS_DB), autocommit=True)
            with lock:
                opened.append((worker.executor, worker.results))
        task = tasks[inst.task_id]
        lang, level = Language(inst.language), Complexity(inst.complexity)
        question = task.question(lang, level)
        toolkit = make_toolkit(config, shared, worker.executor, task, lang, question)
        followups = tuple(t.user[lang] for t in task.turns[1:] if t.user and not task.hidden_slots)
        traj = run_dialogue(
            make_policy(config, task, lang),
            toolkit,
            instance_id=inst.instance_id,
            task_id=task.id,
            language=inst.language,
            complexity=inst.complexity,
            question=question,
            followups=followups,
            limits=limits(config),
            system_prompt=system_prompt(config.prompt_version, tuple(config.disabled_prompt_rules)),
        )
        return store.record(worker.results, run_id, shard, traj)

    recorded = 0
    try:
        with ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix=f"shard{shard}") as pool:
            futures = [pool.submit(run_one, i) for i in todo]
            for n, fut in enumerate(as_completed(futures), 1):
                recorded += fut.result()
                progress(n, len(todo))
    finally:
        for executor, conn in opened:
            executor.close()
            conn.close()
    store.export_jsonl(settings, run_id, shard)
    return ShardReport(
        shard, len(mine), len(mine) - len(todo), recorded, time.perf_counter() - t0, shared.cache.stats()
    )
