"""A ticket that asks what a released task asks in another SQL shape: who has X but lacks Y, read from what its
SQL names (codes, classes, departments, thresholds) and what it says is missing, in whatever shape (NOT EXISTS,
NOT IN, a NOT flag, LEFT JOIN ... IS NULL, EXCEPT). Mining drops such a ticket as covered, naming the task."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from evalpkg.sql import fingerprint
from evalpkg.sql.parse import parse_statement
from evalpkg.sql.vocabulary import DATE_TEXT
from evalpkg.testset.models import Task, TaskType


@dataclass(frozen=True)
class Asked:
    """What a question names, read from its SQL: its tables, the codes, drug classes, departments and
    thresholds it filters on (its literals but periods, row counts and the 0 and 1 of flags), and those of
    them it negates: inside NOT EXISTS, NOT IN, an EXISTS flag read as NOT flag, a LEFT JOIN whose rows
    must be missing (IS NULL), or the right side of EXCEPT."""

    tables: frozenset[str]
    literals: frozenset[str]
    negated: frozenset[str]

    @classmethod
    def of(cls, sql: str) -> Asked:
        tree = parse_statement(sql)
        return cls(frozenset(fingerprint.tables_in(tree)), _named(tree), _negated(tree))


def _named(node: exp.Expr) -> frozenset[str]:
    out = set()
    for lit in node.find_all(exp.Literal):
        text = str(lit.this).strip()
        if isinstance(lit.parent, exp.Interval | exp.Limit | exp.Offset) or DATE_TEXT.fullmatch(text):
            continue
        if lit.is_string:
            out.add(repr(text))
        elif float(text) not in (0.0, 1.0):
            out.add(f"{float(text):g}")
    return frozenset(out)


def _unwrapped(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _negated(tree: exp.Expr) -> frozenset[str]:
    """The literals of what the question says is missing."""
    scopes: list[exp.Expr] = []
    flags = set()
    for n in tree.find_all(exp.Not):
        inner = _unwrapped(n.this)
        if isinstance(inner, exp.Exists | exp.In):
            scopes.append(inner)
        elif isinstance(inner, exp.Column):
            flags.add(inner.name.lower())
    scopes += [a.this for a in tree.find_all(exp.Alias) if a.alias.lower() in flags and a.this.find(exp.Exists)]
    missing = {
        c.table.lower()
        for i in tree.find_all(exp.Is)
        if isinstance(i.expression, exp.Null) and not isinstance(i.parent, exp.Not)
        if isinstance(c := _unwrapped(i.this), exp.Column) and c.table
    }
    scopes += [j for j in tree.find_all(exp.Join) if j.side.upper() == "LEFT" and j.alias_or_name.lower() in missing]
    scopes += [e.expression for e in tree.find_all(exp.Except)]
    return frozenset(lit for scope in scopes for lit in _named(scope))


def released_negations(tasks: Sequence[Task]) -> list[tuple[Task, Asked]]:
    """The negation tasks of a release (who lacks something), with what each names: what meaning_repeat reads."""
    return [(t, Asked.of(sql)) for t in tasks if t.type is TaskType.negation for sql in t.gold_sql]


def meaning_repeat(task: Task, released: Sequence[tuple[Task, Asked]]) -> str | None:
    """Why a candidate asks what a released task asks though its SQL has another shape (None: it does not).
    Both ask who has X but lacks Y (the released one a negation task; the candidate's SQL says what is
    missing, in whatever shape, a LEFT JOIN ... IS NULL too): the candidate reads only tables the released gold
    reads, what it says is missing (Y) is what the released gold says is missing, and what else it names
    (X: codes, classes, departments, thresholds) the released gold names too. An "AF ('I48%') without an
    anticoagulant ('抗凝药')" ticket asks what neg-af_no_anticoagulant_age_group asks (whose gold names an
    age group and antiplatelets besides); "AF without an antiplatelet" does not."""
    mine = Asked.of(task.gold_sql[0])
    lacks = {lit for lit in mine.negated if lit.startswith("'")}
    has = {lit for lit in mine.literals - mine.negated if lit.startswith("'")}
    if not (lacks and has):
        return None  # too little named to tell what it asks
    for other, theirs in released:
        if mine.tables <= theirs.tables and mine.negated <= theirs.negated and mine.literals <= theirs.literals:
            template = f" (template {other.provenance.template_id})" if other.provenance.template_id else ""
            return (
                f"asks what released task {other.id}{template} asks: who has {', '.join(sorted(has))} "
                f"but no {', '.join(sorted(lacks))}, in the same tables"
            )
    return None
