"""A query ticket made into a task with the parts a curated one has: declared outputs (the gold's result
columns, with their meanings from the data dictionary), answer points (every number of the gold
result, a monthly series included), tags, and a wording in each language and complexity drafted for a
reviewer to approve or edit (refresh.Wording says who drafted and who approved each).

Drafts: the ticket's own request is the zh colloquial wording; with a model endpoint the other five are
drafted by the model from the request, the SQL and the outputs; without one the zh ones come from the
request and the en ones are only a description of the SQL, which a reviewer must reword before they can
be approved. Agreement is never set here: it is measured from a second annotation (refresh.annotate)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from evalpkg.sql import fingerprint
from evalpkg.sql.parse import parse_statement
from evalpkg.sql.vocabulary import ABSOLUTE_PERIOD, RELATIVE_WORDS
from evalpkg.testset.build import TYPE_PREFIX
from evalpkg.testset.classify import AGG_EN, classify
from evalpkg.testset.models import (
    OUTPUTS_FORMAT,
    Annotator,
    AnswerPoint,
    ArgConstraint,
    Complexity,
    ExpectedToolCall,
    Language,
    Output,
    Provenance,
    QuestionVariant,
    Review,
    Task,
    Turn,
)
from evalpkg.testset.params import RETIRED_GLUCOSE_CUTOFFS, RETIRED_GLUCOSE_WHY

if TYPE_CHECKING:
    import psycopg

    from evalpkg.agent.model_client import ModelClient

GENERATOR = "refresh-v2"
AGG_ZH = {"count": "数量", "avg": "平均值", "sum": "合计", "max": "最大值", "min": "最小值"}
MAX_POINTS = 24  # answer points per task: a two-year monthly series at most
Key = tuple[Language, Complexity]
KEYS: list[Key] = [(lang, level) for lang in Language for level in Complexity]
Meanings = dict[str, tuple[str, str]]  # column -> (zh, en), from meta.data_dictionary
NEEDS_WORDING = "needs wording"  # a placeholder, not a wording: a reviewer writes the text
PLACEHOLDER = "(needs wording)"


def dictionary(conn: psycopg.Connection) -> Meanings:
    with conn.transaction():
        rows = conn.execute("select column_name, meaning, meaning_en from meta.data_dictionary").fetchall()
    return {str(c).lower(): (str(zh), str(en)) for c, zh, en in rows if zh and en}


def _meaning(node: exp.Expr, meanings: Meanings) -> tuple[str, str]:
    """What one select expression computes, in zh and en."""
    agg = node.find(exp.AggFunc)
    trunc = node.find(exp.DateTrunc, exp.TimestampTrunc)
    column = node.find(exp.Column)
    zh, en = meanings.get(column.name.lower(), (column.name, column.name)) if column else ("行", "rows")
    if agg is not None:
        distinct = agg.find(exp.Distinct) is not None
        if agg.key == "count" and column is None:
            return "记录数", "number of rows"
        word_en = AGG_EN.get(agg.key, agg.key)
        return (
            f"{zh}{'（去重）' if distinct else ''}的{AGG_ZH.get(agg.key, agg.key)}",
            f"{word_en}{' distinct' if distinct else ''} {en}",
        )
    if trunc is not None:
        unit = (trunc.args.get("unit") or exp.var("month")).name.lower().strip("'")
        return f"{ {'month': '月份', 'year': '年份', 'quarter': '季度', 'week': '周'}.get(unit, unit) }（按{zh}）", (
            f"{unit} (of {en})"
        )
    return zh, en


def outputs(sql: str, columns: list[str], meanings: Meanings) -> list[Output]:
    """One output per gold result column, named after it and meaning what its expression computes."""
    select = parse_statement(sql).find(exp.Select)
    expressions = list(select.expressions) if select is not None else []
    if len(expressions) != len(columns) or any(isinstance(e, exp.Star) for e in expressions):
        return []  # select *: the columns are the table's; no outputs declared, every column graded
    out, names = [], set()
    for column, node in zip(columns, expressions, strict=True):
        name = re.sub(r"[^a-z0-9_]+", "_", column.lower()).strip("_") or "value"
        name = name if name[0].isalpha() else f"c_{name}"
        while name in names:
            name += "_2"
        names.add(name)
        zh, en = _meaning(node, meanings)
        out.append(Output(name=name, meaning={Language.zh: zh, Language.en: en}, column=column))
    return out


def is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def answer_points(rows: Sequence[Sequence[Any]]) -> list[AnswerPoint]:
    """Every numeric cell of the gold, row by row (a monthly series: each month's number), up to MAX_POINTS."""
    cells = [(r, c) for r, row in enumerate(rows) for c, v in enumerate(row) if is_number(v)]
    return [AnswerPoint(kind="number", row=r, col=c) for r, c in cells[:MAX_POINTS]]


def all_zero(rows: Sequence[Sequence[Any]]) -> bool:
    """Every number of the result is 0: a wrong query that finds nothing would agree with it."""
    return all(float(v) == 0 for row in rows for v in row if is_number(v))


# Lab cut-offs the clinical review withdrew, per lab item code: the templates' retired parameter values.
WITHDRAWN_CUTOFFS = (("GLU", RETIRED_GLUCOSE_CUTOFFS, RETIRED_GLUCOSE_WHY),)


def withdrawn_threshold(sql: str) -> str | None:
    """Why the ticket's SQL compares a lab with a cut-off the clinical review withdrew (None: it does not)."""
    tree = parse_statement(sql)
    strings = {str(lit.this).upper() for lit in tree.find_all(exp.Literal) if lit.is_string}
    numbers = {float(lit.this) for lit in tree.find_all(exp.Literal) if lit.is_number}
    for code, cutoffs, why in WITHDRAWN_CUTOFFS:
        if code in strings and (hit := numbers & {float(v) for pair in cutoffs for v in pair}):
            return f"{code} cut-off {min(hit):g}: {why}"
    return None


NOW_SQL = "pinned_now"  # the snapshot's now: (select pinned_now from meta.snapshot)
ANCHOR_DAYS = 31  # a date this close to the ticket's own date is its "today"


def relative_anchor(request: str, sql: str, created: datetime) -> str | None:
    """Why a ticket's period is relative to the day it was asked (None: it is not): its request says "recent"
    (or its SQL counts an interval back from a date within ANCHOR_DAYS of the ticket's) while the SQL pins a
    fixed date instead of the snapshot's now, so the gold answers another period than the question on any
    later snapshot. A request that states the absolute period (a year, a month) asks for that period."""
    if ABSOLUTE_PERIOD.search(request) or NOW_SQL in sql.lower():
        return None
    tree = parse_statement(sql)
    dates = _literal_dates(tree)
    if not dates:
        return None
    if words := RELATIVE_WORDS.search(request):
        return (
            f"{words.group(0)!r} counted from the fixed date {min(dates)}, not (select pinned_now from meta.snapshot)"
        )
    near = [d for d in _interval_dates(tree) if abs((d - created.date()).days) <= ANCHOR_DAYS]
    if near:
        return f"an interval counted from {near[0]}, the ticket's own date, not (select pinned_now from meta.snapshot)"
    return None


def period_anchor(sql: str, created: datetime) -> str:
    """Which date the gold's periods count from, for the reviewer: the snapshot's now (the period moves with
    each snapshot), a fixed date with an interval counted from it (the ticket's own date, or another), fixed
    dates only (an absolute period), or none (all of time)."""
    asked = created.date()
    if NOW_SQL in sql.lower():
        return (
            f"the snapshot's now, (select pinned_now from meta.snapshot): each snapshot's own period (the ticket "
            f"was asked on {asked})"
        )
    tree = parse_statement(sql)
    counted = sorted(set(_interval_dates(tree)))
    if counted:
        days = (counted[0] - asked).days
        side = f"{abs(days)} days {'before' if days < 0 else 'after'} the ticket's date {asked}"
        whose = "the ticket's own date" if abs(days) <= ANCHOR_DAYS else side
        return f"the fixed date {counted[0]} ({whose}): the period does not move with the snapshot"
    dates = sorted(set(_literal_dates(tree)))
    if dates:
        return f"none: fixed dates only ({', '.join(map(str, dates))}), an absolute period"
    return "none: no date in the gold (all of time)"


def _literal_dates(tree: exp.Expr) -> list[date]:
    """The dates the SQL writes as string literals, in the order it writes them."""
    return [d for lit in tree.find_all(exp.Literal) if lit.is_string if (d := _date_of(str(lit.this)))]


def _interval_dates(tree: exp.Expr) -> list[date]:
    """The dates an interval is counted from or to (date '2031-04-18' - interval '6 months'), in order."""
    return [
        d
        for iv in tree.find_all(exp.Interval)
        if isinstance(iv.parent, exp.Sub | exp.Add)
        for lit in iv.parent.find_all(exp.Literal)
        if (d := _date_of(str(lit.this)))
    ]


def _date_of(text: str) -> date | None:
    try:
        return date.fromisoformat(text.strip()[:10])
    except ValueError:
        return None


def rule_drafts(request: str) -> dict[Key, tuple[str, str]]:
    """(text, drafted_by) for every wording, without a model: the clinician's own request as the zh colloquial
    one, and the others left for a reviewer to write (NEEDS_WORDING: a placeholder never approved as it is,
    never SQL read aloud); the request stays on the candidate as source material."""
    drafts = {key: (PLACEHOLDER, NEEDS_WORDING) for key in KEYS}
    drafts[Language.zh, Complexity.colloquial] = (request, "ticket")
    return drafts


DRAFT_PROMPT = (
    "A clinician sent this request to the hospital IT department, which answered it with the SQL below. "
    "Write the same question as clinicians would ask it, without SQL, table or column names: zh plain and "
    "technical (technical states every definition: which date column, which codes), en colloquial, plain "
    "and technical. The question must ask for exactly these outputs: {outputs}.\n"
    "Request: {request}\nSQL: {sql}\n"
    'Answer with JSON only: {{"zh": {{"plain": "...", "technical": "..."}}, '
    '"en": {{"colloquial": "...", "plain": "...", "technical": "..."}}}}'
)


@dataclass
class ModelDrafter:
    """Drafts wordings through an OpenAI-compatible endpoint (the run's model)."""

    client: ModelClient
    model: str

    def draft(self, request: str, sql: str, declared: list[Output]) -> dict[Key, str]:
        """The five wordings besides the ticket's own; raises ValueError when the reply is not them."""
        described = "; ".join(f"{o.name} ({o.meaning[Language.en]})" for o in declared) or "the query's result"
        prompt = DRAFT_PROMPT.format(outputs=described, request=request, sql=sql)
        response = self.client.chat(
            [], model=self.model, temperature=0.0, messages=[{"role": "user", "content": prompt}]
        )
        text = (response.choices[0].message.content or "").strip()
        body = json.loads(text[text.find("{") : text.rfind("}") + 1])
        out: dict[Key, str] = {}
        for lang, levels in (("zh", ("plain", "technical")), ("en", ("colloquial", "plain", "technical"))):
            for level in levels:
                value = body.get(lang, {}).get(level)
                if not isinstance(value, str) or len(value.strip()) < 4:
                    raise ValueError(f"the model's reply has no {lang}/{level} wording")
                out[(Language(lang), Complexity(level))] = value.strip()
        return out


def candidate_task(
    ticket_id: int,
    created: datetime,
    sql: str,
    drafts: dict[Key, tuple[str, str]],
    declared: list[Output],
    rows: Sequence[Sequence[Any]],
) -> Task:
    kind, difficulty, tags = classify(sql)
    tables = fingerprint.tables(sql)
    variants = [
        QuestionVariant(language=lang, complexity=level, text=text) for (lang, level), (text, _) in drafts.items()
    ]
    return Task(
        format_version=OUTPUTS_FORMAT,
        id=f"{TYPE_PREFIX[kind]}-ticket_{ticket_id}-001",
        type=kind,
        difficulty=difficulty,
        variants=variants,
        turns=[
            Turn(
                expected_tool_calls=[
                    ExpectedToolCall(name="query_schema", required=False),
                    ExpectedToolCall(
                        name="execute_sql", args={"sql": ArgConstraint(contains_all=tables)}, after=["query_schema"]
                    ),
                ]
            )
        ],
        gold_sql=[sql],
        outputs=declared,
        result={"order_matters": " order by " in sql.lower()},
        answer_points=answer_points(rows),
        tags=tags,
        tables=tables,
        provenance=Provenance(
            source="ticket",
            ticket_id=ticket_id,
            params={"created_at": created.isoformat()},
            generator_version=GENERATOR,
        ),
        # pending, agreement not measured yet: a second annotation sets it (refresh.annotate)
        review=Review(annotators=[Annotator(role="generator", id=GENERATOR)], agreement=0.0, status="pending"),
        maintenance_notes=f"mined from query ticket #{ticket_id}",
    )
