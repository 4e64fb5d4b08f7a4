"""Reading a query ticket's SQL: task type, difficulty, tags, and plain-language descriptions."""

from __future__ import annotations

import re

from sqlglot import exp

from evalpkg.sql.parse import parse_statement
from evalpkg.sql.vocabulary import TIME_COLUMNS
from evalpkg.testset.models import Difficulty, TaskType

CODE_COLUMNS = {"visit_type", "ksdm", "xmdm", "ypdm", "icd10_code", "zdlx", "cyfs", "xb", "yzlx", "bgzt", "zfbz"}
AGG_EN = {"count": "number of", "avg": "average", "sum": "total", "max": "maximum", "min": "minimum"}


def _tree(sql: str) -> exp.Expr:
    return parse_statement(sql)


def columns(sql: str) -> set[str]:
    return {c.name.lower() for c in _tree(sql).find_all(exp.Column)}


def classify(sql: str) -> tuple[TaskType, Difficulty, list[str]]:
    tree = _tree(sql)
    cols = columns(sql)
    table_names = {t.name for t in tree.find_all(exp.Table)}
    text = sql.lower()
    negated = any(isinstance(n.this, exp.Exists | exp.In) for n in tree.find_all(exp.Not))
    if "mg/dl" in text or re.search(r"/\s*18(\.0)?\b", text):
        kind = TaskType.unit_conversion
    elif negated:
        kind = TaskType.negation
    elif tree.find(exp.DateTrunc, exp.TimestampTrunc) or "date_trunc" in text:
        kind = TaskType.time_series
    elif len(table_names) > 1:
        kind = TaskType.join_aggregate
    else:
        kind = TaskType.single_table
    subqueries = len(list(tree.find_all(exp.Subquery, exp.Exists)))
    conditions = len(list(tree.find_all(exp.EQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like)))
    score = len(table_names) + subqueries + (conditions > 3) + bool(tree.find(exp.Case))
    difficulty = Difficulty.easy if score <= 1 else Difficulty.medium if score <= 2 else Difficulty.hard
    tags = []
    if cols & TIME_COLUMNS:
        tags.append("time_semantics")
    if kind is TaskType.unit_conversion:
        tags.append("unit")
    if negated or " is null" in text:
        tags.append("null_semantics")
    if cols & {"bgzt", "zfbz"}:
        tags.append("soft_delete")
    if cols & CODE_COLUMNS:
        tags.append("dictionary_code")
    if len(table_names) > 1:
        tags.append("multi_table")
    return kind, difficulty, tags
