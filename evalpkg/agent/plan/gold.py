"""Gold plans: every answerable task's plan, derived from its gold SQL, compiled by the same compiler a
plan agent's plan goes through and graded against the gold with the scorer's own comparison."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evalpkg.agent.plan.compiler import compile_plan
from evalpkg.agent.plan.from_sql import Untranslatable, plan_from_sql
from evalpkg.errors import PlanError
from evalpkg.grading.execution import GoldCache, gold_match

if TYPE_CHECKING:
    from evalpkg.agent.plan.model import Plan
    from evalpkg.agent.schema import Catalog
    from evalpkg.sql.gold import GoldRunner
    from evalpkg.testset.models import Task


@dataclass
class GoldPlanCheck:
    task: Task
    plan: Plan | None
    sql: str | None
    reason: str  # '' where the plan's SQL returns the gold's result

    @property
    def ok(self) -> bool:
        return not self.reason


def gold_plan(task: Task) -> Plan:
    """The task's gold plan (raises Untranslatable where the grammar cannot say its gold SQL)."""
    if not task.gold_sql:
        raise Untranslatable(f"{task.id} has no gold SQL (not answerable)")
    return plan_from_sql(task.gold_sql[0])


def check_gold_plans(tasks: list[Task], catalog: Catalog, golds: GoldRunner) -> list[GoldPlanCheck]:
    """One check per answerable task: the plan exists, compiles and its result matches a gold."""
    gold = GoldCache(golds)
    checks = []
    for task in (t for t in tasks if t.gold_sql):
        plan = sql = None
        try:
            plan = gold_plan(task)
            sql = compile_plan(plan, catalog)
        except Untranslatable as exc:
            reason = f"the grammar has no form for {exc}"
        except PlanError as exc:
            reason = f"the plan does not compile: {exc}"
        else:
            prediction = gold.prediction(sql)
            if prediction.status == "failure":
                reason = "the compiled SQL fails on the snapshot"
            else:
                matches = gold_match(task, prediction, gold)[0]
                reason = "" if matches else "the compiled SQL's result differs from the gold"
        checks.append(GoldPlanCheck(task, plan, sql, reason))
    return checks


def coverage(checks: list[GoldPlanCheck]) -> dict[str, tuple[int, int]]:
    """Per task type (and 'all'): (tasks whose gold plan matches, answerable tasks)."""
    matched = Counter(c.task.type.value for c in checks if c.ok)
    total = Counter(c.task.type.value for c in checks)
    out = {t: (matched[t], n) for t, n in sorted(total.items())}
    return out | {"all": (sum(matched.values()), sum(total.values()))}
