"""Trap mutations: a task's gold SQL as an agent blind to one of its traps would write it.

Each trap tag has one mechanical, trap-blind rewrite (sqlglot, PostgreSQL): every rule of the tag that
finds something to change is applied at once. A rewrite that finds nothing is "not applicable", with the
reason, never a pass. `measure` runs each tagged task's rewrite on the snapshot and grades it like an
agent's SQL (pipeline.score.execution_match, per variant, against the golds it admits): the trap bites when no
variant accepts it.
The perturbation agents (agent.policies) use the same rewrites.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from sqlglot import exp

from evalpkg.errors import QueryError, SqlParseError
from evalpkg.sql.parse import DIALECT, parse_statement
from evalpkg.testset.release import VERSION_RE

if TYPE_CHECKING:
    from evalpkg.sql.gold import GoldRunner
    from evalpkg.testset.models import Task

TRAP_TAGS: Final = ("time_semantics", "null_semantics", "unit", "soft_delete", "dictionary_code")
NON_TRAP_TAGS: Final = frozenset({"ambiguous", "unanswerable", "ratio", "ranking", "trend", "multi_table"})
# From this release on, a tagged trap that does not bite (or cannot be checked) or a failed premise in a
# reference world (testset.worlds) fails validation; v1..v3 are immutable and only report them.
TRAP_BITE_REQUIRED_FROM: Final = "v4"

# the column a careless agent reads instead (data dictionary, time_semantics): discharges by admission time,
# admissions and visits by registration time, labs by report time, orders by their stop time
NAIVE_TIME_COLUMN: Final = {"cyrq": "ryrq", "ryrq": "ghrq", "cysj": "report_time", "kssj": "jssj"}
STATUS_COLUMNS: Final = frozenset({"bgzt", "zfbz"})  # C = cancelled report, 1 = voided order
UNIT_COLUMNS: Final = frozenset({"unit"})
# codes only the dictionary explains (visit type, disposition, sex, diagnosis and order type, department
# flags incl. the retired one, drug class, abnormal flag)
CODED_COLUMNS: Final = frozenset(
    {"visit_type", "cyfs", "xb", "hyzk", "zdlx", "yzlx", "lcks_bz", "ty_bz", "ypfl", "result_flag"}
)
NULLABLE_RESULT = ("t_lab_result", "result_value")  # a row with NULL here is a test without a valid result

Rule = Callable[[exp.Expr], list[str]]  # rewrites the tree in place; says what it changed


def _scope(node: exp.Expr) -> exp.Expr | None:
    return node.find_ancestor(exp.Select)


def _mentions(node: exp.Expr, names: Iterable[str]) -> bool:
    """node reads one of the columns itself (not only inside a subquery of its own)."""
    wanted, scope = set(names), node if isinstance(node, exp.Select) else _scope(node)
    return any(c.name.lower() in wanted and _scope(c) is scope for c in node.find_all(exp.Column))


def _fold(node: exp.Boolean) -> None:
    """node, a TRUE/FALSE just put in place of a condition, folded into the conditions around it."""
    parent, value = node.parent, bool(node.this)
    if isinstance(parent, exp.Paren | exp.Not):
        new = exp.Boolean(this=value != isinstance(parent, exp.Not))
        parent.replace(new)
        _fold(new)
    elif isinstance(parent, exp.And | exp.Or):
        if value == isinstance(parent, exp.Or):  # TRUE OR x, FALSE AND x
            new = exp.Boolean(this=value)
            parent.replace(new)
            _fold(new)
        else:
            parent.replace(parent.right if parent.left is node else parent.left)
    elif isinstance(parent, exp.Where) and value:
        owner = parent.parent
        if isinstance(owner, exp.Filter):
            owner.replace(owner.this)
        else:
            parent.pop()


def _set(tree: exp.Expr, found: list[exp.Expr], value: Callable[[exp.Expr], bool]) -> list[str]:
    changed = []
    for pred in found:
        if pred.root() is not tree:  # folded away with an earlier one
            continue
        changed.append(f"{pred.sql(dialect=DIALECT)} -> {'TRUE' if value(pred) else 'FALSE'}")
        node = exp.Boolean(this=value(pred))
        pred.replace(node)
        _fold(node)
    return changed


def _predicates(tree: exp.Expr, columns: frozenset[str]) -> list[exp.Expr]:
    return [
        p for p in tree.find_all(exp.Predicate) if not isinstance(p, exp.SubqueryPredicate) and _mentions(p, columns)
    ]


def _drop_filters(columns: frozenset[str]) -> Rule:
    """Every condition on these columns holds: the filter is gone (the careless agent never wrote it)."""
    return lambda tree: _set(tree, _predicates(tree, columns), lambda _: True)


def _drop_unit_conversion(tree: exp.Expr) -> list[str]:
    """A CASE on the unit becomes its ELSE branch: the raw value, whatever its unit."""
    changed = []
    for case in list(tree.find_all(exp.Case)):
        if case.root() is tree and any(_mentions(i.this, UNIT_COLUMNS) for i in case.args.get("ifs") or []):
            raw = case.args.get("default") or case.args["ifs"][0].args["true"]
            changed.append(f"CASE on unit -> {raw.sql(dialect=DIALECT)}")
            case.replace(raw.copy())
    return changed


def _naive_time_columns(tree: exp.Expr) -> list[str]:
    changed = set()
    for col in tree.find_all(exp.Column):
        naive = NAIVE_TIME_COLUMN.get(col.name.lower())
        if naive:
            changed.add(f"{col.name} -> {naive}")
            col.set("this", exp.to_identifier(naive))
    return sorted(changed)


def _null_blind(tree: exp.Expr) -> list[str]:
    """Nothing is NULL: x IS NULL never holds, x IS NOT NULL always does (still admitted, not reported and
    no valid result vanish; rows without a value are counted)."""
    found = [p for p in tree.find_all(exp.Is) if isinstance(p.expression, exp.Null)]
    return _set(tree, list(found), lambda p: bool(p.args.get("negate")))


def _null_read_as_absent(tree: exp.Expr) -> list[str]:
    """'Never tested' read as 'no valid result': a NOT EXISTS over lab rows skips rows with a NULL result."""
    table, column = NULLABLE_RESULT
    changed = []
    for ex in list(tree.find_all(exp.Exists)):
        sub = ex.this
        labs = [t for t in sub.find_all(exp.Table) if t.name == table and _scope(t) is sub]
        if isinstance(ex.parent, exp.Not) and isinstance(sub, exp.Select) and labs and not _mentions(sub, [column]):
            qualifier = labs[0].alias_or_name
            not_null = exp.Is(this=exp.column(column, table=qualifier), expression=exp.Null(), negate=True)
            sub.where(not_null, append=True, copy=False)
            changed.append(f"NOT EXISTS over {table}: + {qualifier}.{column} IS NOT NULL")
    return changed


def _null_as_zero(tree: exp.Expr) -> list[str]:
    changed = []
    for avg in list(tree.find_all(exp.Avg)):
        if isinstance(avg.this, exp.Column):
            changed.append(f"avg({avg.this.sql(dialect=DIALECT)}) counts NULL as 0")
            avg.this.replace(exp.Coalesce(this=avg.this.copy(), expressions=[exp.Literal.number(0)]))
    return changed


def _count_rows(tree: exp.Expr) -> list[str]:
    """count(distinct patient_id) -> count(*): rows instead of patients (not a trap; a perturbation)."""
    changed = []
    for count in list(tree.find_all(exp.Count)):
        inner = count.this
        if isinstance(inner, exp.Distinct) and any(c.name == "patient_id" for c in inner.find_all(exp.Column)):
            changed.append(f"{count.sql(dialect=DIALECT)} -> count(*)")
            count.set("this", exp.Star())
    return changed


# (rules, why a tag's rewrite may find nothing to change)
REWRITES: Final[dict[str, tuple[tuple[Rule, ...], str]]] = {
    "time_semantics": ((_naive_time_columns,), f"reads none of the time columns {sorted(NAIVE_TIME_COLUMN)}"),
    "null_semantics": (
        (_null_blind, _null_read_as_absent, _null_as_zero),
        "no IS [NOT] NULL, no NOT EXISTS over lab rows, no avg of a column",
    ),
    "unit": ((_drop_unit_conversion, _drop_filters(UNIT_COLUMNS)), "no CASE or condition on the unit column"),
    "soft_delete": ((_drop_filters(STATUS_COLUMNS),), f"no condition on {sorted(STATUS_COLUMNS)}"),
    "dictionary_code": ((_drop_filters(CODED_COLUMNS),), "no condition on a dictionary-coded column"),
    "wrong_column": ((_count_rows,), "no count(distinct patient_id)"),
}
PERTURBATION_REWRITES: Final = {"wrong_time_field": "time_semantics", "dropped_null_handling": "null_semantics"}


@dataclass(frozen=True)
class Mutation:
    sql: str | None  # None: not applicable
    changes: tuple[str, ...] = ()
    reason: str = ""  # why not applicable


def mutate(sql: str, rewrite: str) -> Mutation:
    """The gold SQL rewritten by one trap tag's rules (or "wrong_column")."""
    rules, nothing = REWRITES[rewrite]
    try:
        tree = parse_statement(sql)
    except SqlParseError as exc:
        return Mutation(None, reason=str(exc))
    changes = list(dict.fromkeys(change for rule in rules for change in rule(tree)))
    if not changes:
        return Mutation(None, reason=nothing)
    return Mutation(tree.sql(dialect=DIALECT, normalize_functions="lower"), tuple(changes))


def perturb_sql(sql: str, kind: str) -> str:
    """The perturbation agents' defects (runconfig.PERTURBATIONS): the SQL unchanged where the
    rewrite does not apply or the kind is not a SQL rewrite."""
    rewrite = PERTURBATION_REWRITES.get(kind, kind)
    return (mutate(sql, rewrite).sql or sql) if rewrite in REWRITES else sql


DROPPED_TAGS = re.compile(r" ?Tag\(s\) dropped: [^.]*\.")


def notes_with_dropped(notes: str, why: str = "") -> str:
    """Maintenance notes ending with one sentence per dropped trap tag, the latest word on each: a re-cut that
    drops a tag again says so once."""
    sentences = [s.strip() for s in DROPPED_TAGS.findall(notes)] + ([f"Tag(s) dropped: {why}."] if why else [])
    latest = {re.sub(r" in \d+ of \d+ reference worlds", "", s): s for s in sentences}
    return " ".join([DROPPED_TAGS.sub("", notes).strip(), *latest.values()]).strip()


def required(version: str, since: str = TRAP_BITE_REQUIRED_FROM) -> bool:
    """Whether a release is held to a rule that applies from `since` on."""
    m, s = VERSION_RE.match(version), VERSION_RE.match(since)
    return bool(m and s and int(m[1]) >= int(s[1]))


Status = Literal["bites", "does_not_bite", "not_applicable", "error"]


@dataclass(frozen=True)
class Outcome:
    task_id: str
    tag: str
    status: Status
    detail: str  # the rewrite's changes, or why it does not bite / apply

    def line(self) -> str:
        return f"{self.task_id} [{self.tag}] {self.status.replace('_', ' ')}: {self.detail}"


@dataclass
class TagRate:
    tasks: int = 0
    bites: int = 0
    does_not_bite: int = 0
    not_applicable: int = 0
    error: int = 0  # the mutation did not run

    @property
    def applicable(self) -> int:
        return self.bites + self.does_not_bite

    def summary(self) -> str:
        rate = f"{100 * self.bites / self.applicable:.0f}%" if self.applicable else "n/a"
        extra = f", {self.not_applicable} n/a" if self.not_applicable else ""
        extra += f", {self.error} failed to run" if self.error else ""
        return f"{rate} ({self.bites}/{self.applicable}{extra})"


def rates(outcomes: Iterable[Outcome]) -> dict[str, TagRate]:
    """Per trap tag: tasks, bitten, not bitten, not applicable, failed; rate = bitten / applicable."""
    out = {tag: TagRate() for tag in TRAP_TAGS}
    for o in outcomes:
        out[o.tag].tasks += 1
        setattr(out[o.tag], o.status, getattr(out[o.tag], o.status) + 1)
    return out


def measure(tasks: Iterable[Task], golds: GoldRunner) -> list[Outcome]:
    """Every trap tag of every task, run on the snapshot (each mutation run as its gold is)."""
    return [_outcome(task, tag, golds) for task in tasks for tag in task.tags if tag in TRAP_TAGS]


def _outcome(task: Task, tag: str, golds: GoldRunner) -> Outcome:
    from evalpkg.grading.execution import GoldCache, execution_match

    mutations = [(k, m) for k, m in enumerate(mutate(sql, tag) for sql in task.gold_sql) if m.sql]
    if not task.gold_sql:
        return Outcome(task.id, tag, "not_applicable", "no gold SQL to mutate (an unanswerable task)")
    if not mutations:
        return Outcome(task.id, tag, "not_applicable", mutate(task.gold_sql[0], tag).reason)
    # variants graded alike (the same columns asked, the same golds admitted) are tried once
    asks: dict[tuple[tuple[str, ...], tuple[int, ...]], tuple[Task, list[str] | None, list[str]]] = {}
    for v in task.variants:
        cols = task.graded_columns(v.language, v.complexity)
        graded = asks.setdefault(
            (tuple(cols or ()), tuple(v.admits)), (task.graded_for(v.language, v.complexity), cols, [])
        )
        graded[2].append(f"{v.language.value}/{v.complexity.value}")
    gold, labels = GoldCache(golds), []
    for k, m in mutations:
        assert m.sql is not None
        label = f"gold #{k + 1} with {'; '.join(m.changes)}"
        try:
            golds.result(m.sql)
            passed = [
                n
                for worded, cols, names in asks.values()
                if execution_match(worded, m.sql, gold, cols)[1]
                for n in names
            ]
        except QueryError as exc:
            return Outcome(task.id, tag, "error", f"{label}: {exc}")
        if passed:
            which = "every variant" if len(passed) == len(task.variants) else "variants " + ", ".join(passed)
            return Outcome(task.id, tag, "does_not_bite", f"{label} is accepted for {which}")
        labels.append(label)
    return Outcome(task.id, tag, "bites", " | ".join(labels))
