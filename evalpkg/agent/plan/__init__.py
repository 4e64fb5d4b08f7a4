"""The plan strategy: the model emits a structured plan of semantic steps, a deterministic
compiler checks it against the catalog and turns it into SQL; gold plans come from the gold SQL."""

from evalpkg.agent.plan.compiler import compile_plan
from evalpkg.agent.plan.from_sql import Untranslatable, plan_from_sql
from evalpkg.agent.plan.model import PLAN_FORMAT_VERSION, Plan, PlanStep
from evalpkg.errors import PlanError

__all__ = ["PLAN_FORMAT_VERSION", "Plan", "PlanError", "PlanStep", "Untranslatable", "compile_plan", "plan_from_sql"]
