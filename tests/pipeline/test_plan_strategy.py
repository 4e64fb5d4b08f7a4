"""The plan strategy end to end: the gold agent submits every task's gold plan through the
catalog functions and submit_plan and scores full marks; a plan with a defect fails exactly where the
same defect in SQL fails; an openai agent's plan goes through the real loop, tools, compiler, executor
and scorer."""

from __future__ import annotations

from collections import Counter

from evalpkg.agent.plan.gold import gold_plan
from evalpkg.pipeline import store
from evalpkg.pipeline.execute import execute_shard
from evalpkg.pipeline.run import plan_run, score_run
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release
from evalpkg.testset.models import Complexity, Language
from tests.agent.fake_endpoint import FakeEndpoint, serving
from tests.pipeline.helpers import imperfections, run_agent

SAMPLE = 21  # a task from each of the 21 type x difficulty cells


def test_gold_plans_score_full_marks_on_every_variant(synced: SyncReport, generated: Settings) -> None:
    tasks = release.load(generated.tasks_dir).by_id()
    _, scored = run_agent(generated, "gold", strategy="plan", limit=SAMPLE)
    assert len({s.task_id for s in scored.scores}) == SAMPLE
    assert len(scored.scores) == SAMPLE * len(Language) * len(Complexity)
    assert imperfections(scored.scores, tasks) == []
    answerable = [s for s in scored.scores if s.answerable]
    assert answerable and [s.instance_id for s in answerable if not (s.exec_match and s.executable_sql)] == []
    assert all("submit_plan" in s.tool_names and "execute_sql" not in s.tool_names for s in answerable)


def test_a_defective_plan_fails_exactly_where_the_defective_sql_fails(synced: SyncReport, generated: Settings) -> None:
    options = {"limit": SAMPLE, "languages": ["zh"], "complexities": ["plain"]}
    _, as_plans = run_agent(generated, "perturb:wrong_time_field", strategy="plan", **options)
    _, as_sql = run_agent(generated, "perturb:wrong_time_field", **options)
    wrong_plans = {s.task_id for s in as_plans.scores if not s.correct}
    assert wrong_plans, "the defect changes no result in the sample: it tests nothing"
    assert wrong_plans == {s.task_id for s in as_sql.scores if not s.correct}


def test_an_openai_plan_agent_goes_through_loop_tools_compiler_executor_and_scorer(
    synced: SyncReport, generated: Settings
) -> None:
    tasks = release.load(generated.tasks_dir).tasks
    asked = Counter(t.question(Language.en, Complexity.plain) for t in tasks)
    # clarification tasks that differ only in a hidden slot share their question: the stand-in, which
    # reads only the question, cannot tell them apart and is left out of them
    plans = {
        t.question(Language.en, Complexity.plain): gold_plan(t).model_dump(exclude_defaults=True)
        for t in tasks
        if t.gold_sql and asked[t.question(Language.en, Complexity.plain)] == 1
    }
    with serving(FakeEndpoint(plans=plans)) as url:
        config = RunConfig(
            name="plan-agent",
            agent="openai",
            endpoint=url,
            model="m",
            strategy="plan",
            limit=21,
            languages=[Language.en],
            complexities=[Complexity.plain],
            concurrency=4,
        )
        run_id = plan_run(generated, config)
        execute_shard(generated, run_id, 0)
    scored = score_run(generated, run_id).scores
    calls = [c for t in store.trajectories(generated, run_id) for c in t.tool_calls() if c.name == "submit_plan"]
    assert calls and all(c.ok and c.sql and c.sql.startswith(("select", "with")) for c in calls)
    planned = {t.id for t in tasks if t.gold_sql and t.question(Language.en, Complexity.plain) in plans}
    answerable = [s for s in scored if s.task_id in planned]
    assert len(answerable) >= 15
    assert [s.instance_id for s in answerable if not (s.exec_match and s.executable_sql)] == []
