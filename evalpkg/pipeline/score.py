"""Stage 4, score: execution match against gold run on the same snapshot, plus process scores
(tool calls, redundancy, expected-call precision/recall, clarification, answer points, cost)."""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Collection
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from evalpkg.agent.claims import NUMBER
from evalpkg.agent.trajectory import Trajectory
from evalpkg.errors import DataError
from evalpkg.pipeline.citations import unsupported_numbers
from evalpkg.pipeline.comparator import COMPARATOR_VERSION, match, order_key_columns
from evalpkg.pipeline.judge import Judge
from evalpkg.sql.executor import QueryFailed, ReadOnlyExecutor, jsonable
from evalpkg.sql.guard import SqlRefused
from evalpkg.testset.models import ArgConstraint, Complexity, ExpectedToolCall, Language, Task, TaskType

SCORE_FORMAT_VERSION = 1
REFUSAL = re.compile(
    r"无法|没有.{0,8}(数据|记录|信息)|不包含|未记录|不能回答|cannot|can't|not available|does not (hold|record|"
    r"contain|include|have)|no (data|record)|not recorded|unable",
    re.IGNORECASE,
)
TEXT_POINT_THRESHOLD = 0.6
UNIT_FACTORS = {("mg/dl", "mmol/l"): 1 / 18.0, ("mmol/l", "mg/dl"): 18.0}


class InstanceScore(BaseModel):
    format_version: int = SCORE_FORMAT_VERSION
    comparator_version: int | None = None  # the execution-match rules it was scored by (None: before v2)
    instance_id: str
    task_id: str
    type: str
    difficulty: str
    language: str
    complexity: str
    repeat: int
    answerable: bool
    status: str  # success | success_empty | failure (of the agent's final SQL, re-run at scoring time)
    exec_match: bool
    correct: bool
    executable_sql: bool
    tool_calls: int
    redundant_calls: int
    expected_precision: float
    expected_recall: float
    order_ok: bool
    clarification_correct: bool
    answer_coverage: float | None
    judged_text_coverage: float | None = None  # text points an LLM judge says are stated (--judge-endpoint)
    missed_points: list[int] = []  # indexes into the task's answer_points
    # defaults keep scores stored before these measures loadable
    numbers_stated: int = 0
    unsupported_numbers: list[str] = []  # stated in the final answer, found in nothing the agent saw
    clarification_needed: bool = False
    clarification_rounds: int = 0
    first_attempt_correct: bool | None = None  # time-series tasks only
    declares_order: bool = False  # the task's expected calls carry `after` constraints
    stop_reason: str
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    tool_names: list[str]
    error_text: str
    final_sql: str | None


class GoldCache:
    """Gold results, computed once per gold query on the run's snapshot."""

    def __init__(self, executor: ReadOnlyExecutor) -> None:
        self.executor = executor
        self._rows: dict[str, tuple[list[str], list[list[Any]]]] = {}

    def get(self, sql: str) -> tuple[list[str], list[list[Any]]]:
        if sql not in self._rows:
            result = self.executor.run(sql)
            if result.capped:  # agents' results stop at the same cap, so no answer could ever match
                raise DataError(f"a gold returns more than the {self.executor.row_cap} row fetch cap: {sql[:80]}")
            self._rows[sql] = (result.columns, result.rows)
        return self._rows[sql]


def _arguments(args: Any) -> dict[str, Any] | None:
    """A call's arguments as a dict (native tool calls carry the JSON text the model wrote); None when
    they are not a JSON object."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return args if isinstance(args, dict) else None


def _satisfies(raw: Any, constraints: dict[str, ArgConstraint]) -> bool:
    args = _arguments(raw)
    if args is None:
        return not constraints
    for name, c in constraints.items():
        value = str(args.get(name, "")).lower()
        if c.equals is not None and value != c.equals.lower():
            return False
        if any(s.lower() not in value for s in c.contains_all):
            return False
        if c.contains_any and not any(s.lower() in value for s in c.contains_any):
            return False
    return True


def expected_call_scores(task: Task, traj: Trajectory) -> tuple[float, float, bool]:
    """(precision, recall, partial order respected) of the actual calls against the expected ones."""
    expected: list[ExpectedToolCall] = [c for turn in task.turns for c in turn.expected_tool_calls]
    actual = traj.tool_calls()
    if not actual:
        return (1.0 if not expected else 0.0), (0.0 if any(e.required for e in expected) else 1.0), True
    seen: set[str] = set()  # an identical repeat of a call is never "expected" a second time
    matched_actual = 0
    for a in actual:
        signature = a.name + json.dumps(a.arguments, sort_keys=True, default=str)
        if signature not in seen and any(a.name == e.name and _satisfies(a.arguments, e.args) for e in expected):
            matched_actual += 1
        seen.add(signature)
    required = [e for e in expected if e.required]
    first_hit: dict[int, int] = {}
    for idx, e in enumerate(required):
        hit = next((i for i, a in enumerate(actual) if a.name == e.name and _satisfies(a.arguments, e.args)), None)
        if hit is not None:
            first_hit[idx] = hit
    recall = len(first_hit) / len(required) if required else 1.0
    order_ok = True
    for idx, e in enumerate(required):
        if idx in first_hit:
            for before in e.after:
                earlier = [i for i, a in enumerate(actual) if a.name == before]
                if earlier and min(earlier) > first_hit[idx]:
                    order_ok = False
    return matched_actual / len(actual), recall, order_ok


def _numbers(text: str) -> list[float]:
    out = []
    for m in NUMBER.finditer(text):
        raw = m.group(0)
        value = float(raw.rstrip("%").replace(",", ""))
        out += [value, value / 100] if raw.endswith("%") else [value]
    return out


def _bigrams(text: str) -> set[str]:
    t = re.sub(r"\s+", " ", text.lower())
    return {t[i : i + 2] for i in range(len(t) - 1)}


def _cell(rows: list[list[Any]] | None, row: int | None, col: int | None) -> Any:
    try:
        return rows[row][col] if rows is not None and row is not None and col is not None else None
    except IndexError:
        return None


def _normalized(text: str) -> str:
    """NFKC, case-folded, without whitespace: full-width and spacing differences do not decide a name."""
    return "".join(unicodedata.normalize("NFKC", text).casefold().split())


def covers(answer: str, point: str) -> float:
    """Share of the point's character bigrams present in the answer: an offline, tokenizer-free
    measure that works for Chinese and English and does not punish longer answers."""
    target = _bigrams(point)
    return len(target & _bigrams(answer)) / len(target) if target else 0.0


def answer_coverage(
    task: Task, answer: str, gold_rows: list[list[Any]] | None, language: str, graded: Collection[int] | None = None
) -> tuple[float | None, list[int]]:
    """Numbers exact within tolerance (percent and unit forms allowed); entities (a named gold cell) by
    the name appearing in the answer, NFKC- and case-normalized; text by character n-gram cosine
    similarity, which works offline and across zh/en tokenisation (an LLM judge, when configured, is
    recorded apart: judged_coverage). A number point whose gold
    cell is NULL or absent on this snapshot states nothing to check and is left out, and so is one in
    a column the variant does not ask for (graded: the gold columns it asks for; None: all). Returns the
    coverage and the indexes of the points the answer missed."""
    numbers = _numbers(answer)
    unit = (task.result.unit or "").lower()
    scored, missed = 0, []
    for index, p in enumerate(task.answer_points):
        if p.kind == "entity":
            if graded is not None and p.col not in graded:
                continue
            name = _cell(gold_rows, p.row, p.col)
            if name is None or not str(name).strip():
                continue
            scored += 1
            hit = _normalized(str(name)) in _normalized(answer)
        elif p.kind == "number":
            if graded is not None and p.col not in graded:
                continue
            try:
                value = float(gold_rows[p.row][p.col]) if gold_rows is not None else None  # type: ignore[index]
            except (IndexError, TypeError, ValueError):
                value = None
            if value is None:
                continue
            scored += 1
            candidates = {value, value * 100}
            for (src, dst), f in UNIT_FACTORS.items():
                if dst == unit and src in answer.lower():
                    candidates.add(value / f)
            hit = any(abs(n - c) <= max(p.tolerance * abs(c), 0.005) for n in numbers for c in candidates)
        elif p.text:
            target = p.text.get(Language(language)) or next(iter(p.text.values()))
            scored += 1
            hit = covers(answer, target) >= TEXT_POINT_THRESHOLD
        else:
            continue
        if not hit:
            missed.append(index)
    return ((scored - len(missed)) / scored if scored else None), missed


def _latency_s(traj: Trajectory) -> float:
    try:
        return (datetime.fromisoformat(traj.ended_at) - datetime.fromisoformat(traj.started_at)).total_seconds()
    except ValueError:
        return 0.0


def _pinned(gold_columns: list[str], pred_columns: list[str]) -> dict[int, int]:
    """Gold column -> the one prediction column with the same name: a column labelled like a gold
    column claims its meaning, so two same-typed counts cannot trade places."""
    names = [c.lower() for c in pred_columns]
    return {j: names.index(c.lower()) for j, c in enumerate(gold_columns) if names.count(c.lower()) == 1}


def asked_columns(task: Task, language: str, complexity: str) -> list[str] | None:
    """The gold columns the instance's variant asks for (None: every gold column)."""
    try:
        return task.graded_columns(Language(language), Complexity(complexity))
    except (KeyError, ValueError):
        return None


def _positions(columns: list[str], asked: list[str] | None) -> list[int] | None:
    """Where the asked columns are in a gold's result (all of them when asked is None); None where the
    gold lacks one: that gold does not answer this variant."""
    names = [c.lower() for c in columns]
    if asked is None:
        return list(range(len(columns)))
    wanted = [c.lower() for c in asked]
    return [names.index(c) for c in wanted] if all(c in names for c in wanted) else None


def _graded_view(
    rows: list[list[Any]], columns: list[str], keep: list[int], keys: list[int] | None
) -> tuple[list[list[Any]], list[str], list[int] | None]:
    """The gold as graded for a variant: only the columns it asks for. ORDER BY keys that are dropped leave
    the gold's row order itself as the order (keys None), which validation checked the data decides."""
    if keep == list(range(len(columns))):
        return rows, columns, keys
    kept_keys = [keep.index(k) for k in keys] if keys is not None and all(k in keep for k in keys) else None
    return [[r[j] for j in keep] for r in rows], [columns[j] for j in keep], kept_keys


def _unclaimed(
    pred: list[list[Any]] | None, pred_columns: list[str], columns: list[str], keep: list[int]
) -> tuple[list[list[Any]] | None, list[str]]:
    """The prediction without columns named like a gold column the variant does not ask for: such a column
    claims that meaning, so it cannot stand for an asked one."""
    asked = {columns[j].lower() for j in keep}
    other = {c.lower() for c in columns} - asked
    stay = [i for i, c in enumerate(pred_columns) if c.lower() not in other]
    if pred is None or len(stay) == len(pred_columns):
        return pred, pred_columns
    return [[r[i] for i in stay] for r in pred], [pred_columns[i] for i in stay]


def execution_match(
    task: Task, sql: str | None, gold: GoldCache, executor: ReadOnlyExecutor, asked: list[str] | None = None
) -> tuple[str, bool, list[list[Any]] | None, list[str]]:
    """(status of the agent's SQL re-run now, whether it matches a gold on the columns the variant asks
    for (asked; None: all), the gold rows answer points are read from: the matching gold's, else the
    first's that answers the variant, and that gold's columns)."""
    pred: list[list[Any]] | None = None
    pred_columns: list[str] = []
    capped = False
    status = "failure"
    if sql:
        try:
            result = executor.run(sql)
            pred = [[jsonable(v) for v in r] for r in result.rows]
            pred_columns, capped = result.columns, result.capped
            status = "success" if result.rows else "success_empty"
        except (QueryFailed, SqlRefused):
            pred = None
    first: tuple[list[list[Any]], list[str]] | None = None
    for gold_sql in task.gold_sql:
        columns, rows = gold.get(gold_sql)
        keep = _positions(columns, asked)
        if keep is None:
            continue
        first = first or (rows, columns)
        keys = order_key_columns(gold_sql, columns) if task.result.order_matters else None
        graded, graded_columns, graded_keys = _graded_view(rows, columns, keep, keys)
        seen, seen_columns = _unclaimed(pred, pred_columns, columns, keep)
        if match(
            seen,
            graded,
            order_matters=task.result.order_matters,
            rel_tol=task.result.numeric_tolerance,
            order_keys=graded_keys,
            truncated=capped,  # a capped result is a sample, never a match
            pinned=_pinned(graded_columns, seen_columns),
        ):
            return status, True, rows, columns
    rows_read, columns_read = first if first is not None else (None, [])
    return status, False, rows_read, columns_read


def _first_attempt_correct(
    task: Task,
    traj: Trajectory,
    gold: GoldCache,
    executor: ReadOnlyExecutor,
    asked: list[str] | None,
    final_matches: bool,
) -> bool | None:
    """Time-series tasks: was the first execute_sql already right (seed: 时序查询首次正确率)? The final
    SQL's match is reused when the first query was also the last."""
    if task.type is not TaskType.time_series or not task.answerable:
        return None
    first = next((c for c in traj.tool_calls() if c.name == "execute_sql"), None)
    if first is None or not first.ok:
        return False
    args = _arguments(first.arguments)
    sql = args.get("sql") if args is not None else None
    if not isinstance(sql, str):
        return False
    if sql == traj.final_sql:
        return final_matches
    return execution_match(task, sql, gold, executor, asked)[1]


def judged_coverage(task: Task, answer: str, language: str, judge: Judge | None) -> float | None:
    """Share of the task's text points the judge says the answer states; None without a judge, a text
    point or any verdict. Kept apart from answer_coverage, which stays the offline, comparable score."""
    if judge is None:
        return None
    lang = Language(language)
    verdicts = [
        judge.holds(answer, p.text.get(lang) or next(iter(p.text.values())), lang)
        for p in task.answer_points
        if p.kind == "text" and p.text
    ]
    judged = [v for v in verdicts if v is not None]
    return sum(judged) / len(judged) if judged else None


def score_instance(
    task: Task,
    traj: Trajectory,
    repeat: int,
    gold: GoldCache,
    executor: ReadOnlyExecutor,
    judge: Judge | None = None,
) -> InstanceScore:
    calls = traj.tool_calls()
    signature = Counter(
        (c.name, json.dumps(c.arguments, sort_keys=True, ensure_ascii=False, default=str)) for c in calls
    )
    wanted = asked_columns(task, traj.language, traj.complexity)
    status, exec_match, gold_rows, gold_columns = execution_match(task, traj.final_sql, gold, executor, wanted)
    graded = None if wanted is None else _positions(gold_columns, wanted) or []
    coverage, missed_points = answer_coverage(task, traj.final_answer, gold_rows, traj.language, graded)
    correct = exec_match if task.answerable else (traj.final_sql is None and bool(REFUSAL.search(traj.final_answer)))
    precision, recall, order_ok = expected_call_scores(task, traj)
    stated, unsupported = unsupported_numbers(traj)
    asked = bool(traj.clarifications)
    if task.type is TaskType.clarification:
        revealed = {s for c in traj.clarifications for s in c["slots"]}
        clarification_correct = asked and {s.slot for s in task.hidden_slots} <= revealed
    else:
        clarification_correct = not asked
    return InstanceScore(
        comparator_version=COMPARATOR_VERSION,
        instance_id=traj.instance_id,
        task_id=task.id,
        type=task.type.value,
        difficulty=task.difficulty.value,
        language=traj.language,
        complexity=traj.complexity,
        repeat=repeat,
        answerable=task.answerable,
        status=status,
        exec_match=exec_match,
        correct=correct,
        executable_sql=any(c.name == "execute_sql" and c.ok for c in calls),
        tool_calls=len(calls),
        redundant_calls=sum(n - 1 for n in signature.values()),
        expected_precision=precision,
        expected_recall=recall,
        order_ok=order_ok,
        clarification_correct=clarification_correct,
        answer_coverage=coverage,
        missed_points=missed_points,
        judged_text_coverage=judged_coverage(task, traj.final_answer, traj.language, judge),
        numbers_stated=stated,
        unsupported_numbers=unsupported,
        clarification_needed=task.type is TaskType.clarification,
        clarification_rounds=len(traj.clarifications),
        first_attempt_correct=_first_attempt_correct(task, traj, gold, executor, wanted, exec_match),
        declares_order=any(c.after for turn in task.turns for c in turn.expected_tool_calls),
        stop_reason=traj.stop_reason,
        latency_s=_latency_s(traj),
        prompt_tokens=sum(s.prompt_tokens for s in traj.steps),
        completion_tokens=sum(s.completion_tokens for s in traj.steps),
        tool_names=[c.name for c in calls],
        error_text=" | ".join(c.error or "" for c in calls if not c.ok)[:2000],
        final_sql=traj.final_sql,
    )
