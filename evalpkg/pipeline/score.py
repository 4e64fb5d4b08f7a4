"""Stage 4, score: execution match against gold run on the same snapshot, plus process scores
(tool calls, redundancy, expected-call precision/recall, clarification, answer points, cost)."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from evalpkg.agent.plan_tools import CATALOG_TOOL_NAMES
from evalpkg.agent.tools import STATE_TOOL
from evalpkg.agent.trajectory import ToolCallRecord, Trajectory
from evalpkg.grading.comparator import COMPARATOR_VERSION
from evalpkg.grading.execution import GoldCache, asked_columns, execution_match, positions
from evalpkg.pipeline.citations import unsupported_numbers
from evalpkg.pipeline.coverage import answer_coverage, judged_coverage
from evalpkg.pipeline.judge import Judge
from evalpkg.pipeline.state_score import score_state
from evalpkg.testset.models import ArgConstraint, ExpectedToolCall, Task, TaskType

SCORE_FORMAT_VERSION = 1
REFUSAL = re.compile(
    r"无法|没有.{0,8}(数据|记录|信息)|不包含|未记录|不能回答|cannot|can't|not available|does not (hold|record|"
    r"contain|include|have)|no (data|record)|not recorded|unable",
    re.IGNORECASE,
)
# What another strategy's tools stand for among a task's expected calls (see as_expected).
STANDS_FOR = {"submit_plan": "execute_sql"} | dict.fromkeys(CATALOG_TOOL_NAMES, "query_schema")


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
    semantic_correct: bool | None = None  # correct here and in every reference world (None: not measured)
    world_misses: list[str] = []  # the reference worlds where the final SQL does not match the gold
    missed_points: list[int] = []  # indexes into the task's answer_points
    # defaults keep scores stored before these measures loadable
    numbers_stated: int = 0
    unsupported_numbers: list[str] = []  # stated in the final answer, found in nothing the agent saw
    clarification_needed: bool = False
    clarification_rounds: int = 0
    first_attempt_correct: bool | None = None  # time-series tasks only
    # the dialogue state (toolset emr-v1+state, state_score.py); None for a run without one
    slot_accuracy: float | None = None
    wrong_slots: str = ""
    questions_about_filled_slots: int | None = None
    turns_to_complete_state: int | None = None
    declares_order: bool = False  # the task's expected calls carry `after` constraints
    # the turns graded on their own: turn 0 (what correct, exec_match and answer_coverage above are of)
    # then each follow-up with its own gold; empty in scores from before follow-ups
    turn_correct: list[bool] = []
    turn_coverage: list[float | None] = []
    stop_reason: str
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    tool_names: list[str]
    error_text: str
    final_sql: str | None  # the dialogue's last query (a follow-up's where there is one)
    graded_sql: str | None = None  # the query `correct` grades: turn 0's (None in scores from before v7)


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


def as_expected(calls: list[ToolCallRecord]) -> list[ToolCallRecord]:
    """The calls as the task's expected calls (written for the react toolset) read them: the plan
    strategy's submit_plan is its execute_sql, with the compiled SQL as the query, and its catalog lookups
    are its schema reads. The state tool records, it does not act: it is left out."""
    out = []
    for c in calls:
        if c.name == STATE_TOOL:
            continue
        if c.name in STANDS_FOR:
            arguments = {"sql": c.sql or ""} if STANDS_FOR[c.name] == "execute_sql" else c.arguments
            c = c.model_copy(update={"name": STANDS_FOR[c.name], "arguments": arguments})
        out.append(c)
    return out


def expected_call_scores(task: Task, traj: Trajectory) -> tuple[float, float, bool]:
    """(precision, recall, partial order respected) of the actual calls against the expected ones."""
    expected: list[ExpectedToolCall] = [c for turn in task.turns for c in turn.expected_tool_calls]
    actual = as_expected(traj.tool_calls())
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


def _latency_s(traj: Trajectory) -> float:
    try:
        return (datetime.fromisoformat(traj.ended_at) - datetime.fromisoformat(traj.started_at)).total_seconds()
    except ValueError:
        return 0.0


def _first_attempt_correct(
    task: Task,
    traj: Trajectory,
    gold: GoldCache,
    asked: list[str] | None,
    final_matches: bool,
    turn_zero_sql: str | None = None,
) -> bool | None:
    """Time-series tasks: was the first execute_sql already right (seed: 时序查询首次正确率)? The final
    SQL's match is reused when the first query was also the last."""
    if task.type is not TaskType.time_series or not task.answerable:
        return None
    first = next((c for c in as_expected(traj.tool_calls()) if c.name == "execute_sql"), None)
    if first is None or not first.ok:
        return False
    args = _arguments(first.arguments)
    sql = args.get("sql") if args is not None else None
    if not isinstance(sql, str):
        return False
    # turn 0's last query (a dialogue's final_sql answers its last follow-up)
    if sql == (turn_zero_sql if turn_zero_sql is not None else traj.final_sql):
        return final_matches
    return execution_match(task, sql, gold, asked)[1]


def graded_answers(task: Task, traj: Trajectory) -> list[tuple[str, str | None] | None]:
    """For each turn graded on its own (Task.graded_turns), the answer and SQL it is judged on: those at
    the end of its last delivered turn before the next graded one (a clarification's answer refines its
    question); None where the dialogue ended before reaching it."""
    delivered = task.delivered_turns()
    answers = [(a.answer, a.sql) for a in traj.turn_answers] + [(traj.final_answer, traj.final_sql)]
    graded = task.graded_turns()
    out: list[tuple[str, str | None] | None] = []
    for after in [*graded[1:], len(task.turns)]:  # each graded turn ends where the next begins
        last = max(k for k, turn in enumerate(delivered) if turn < after)
        out.append(answers[last] if last < len(answers) else None)
    return out


def _followup_scores(
    task: Task,
    traj: Trajectory,
    answers: list[tuple[str, str | None] | None],
    gold: GoldCache,
) -> tuple[list[bool], list[float | None]]:
    """Each follow-up with its own gold, graded on its own as turn 0 is: execution match and answer points."""
    correct: list[bool] = []
    coverage: list[float | None] = []
    for index, answered in zip(task.graded_turns()[1:], answers[1:], strict=True):
        if answered is None:
            correct.append(False)
            coverage.append(0.0 if task.turns[index].answer_points else None)
            continue
        turn = task.turn_task(index)
        wanted = asked_columns(turn, traj.language, traj.complexity)
        _, matched, rows, columns = execution_match(turn, answered[1], gold, wanted)
        graded = None if wanted is None else positions(columns, wanted) or []
        correct.append(matched)
        coverage.append(answer_coverage(turn, answered[0], rows, traj.language, graded)[0])
    return correct, coverage


def _call_counts(calls: list[ToolCallRecord]) -> dict[str, Any]:
    """What the tool calls alone say: how many, how many repeated, whether SQL ran, which failed and why."""
    signature = Counter(
        (c.name, json.dumps(c.arguments, sort_keys=True, ensure_ascii=False, default=str)) for c in calls
    )
    return {
        "executable_sql": any(c.name == "execute_sql" and c.ok for c in as_expected(calls)),
        "tool_calls": len(calls),
        "redundant_calls": sum(n - 1 for n in signature.values()),
        "tool_names": [c.name for c in calls],
        "error_text": " | ".join(c.error or "" for c in calls if not c.ok)[:2000],
    }


def _clarification_correct(task: Task, traj: Trajectory) -> bool:
    """A clarification task: every hidden slot asked about; any other: no question asked."""
    asked = bool(traj.clarifications)
    if task.type is not TaskType.clarification:
        return not asked
    revealed = {s for c in traj.clarifications for s in c["slots"]}
    return asked and {s.slot for s in task.hidden_slots} <= revealed


def score_instance(
    task: Task,
    traj: Trajectory,
    repeat: int,
    gold: GoldCache,
    judge: Judge | None = None,
) -> InstanceScore:
    calls = traj.tool_calls()
    wanted = asked_columns(task, traj.language, traj.complexity)
    worded = task.graded_for(traj.language, traj.complexity)  # turn 0 against the golds its wording admits
    answers = graded_answers(task, traj)
    answer, sql = answers[0] or ("", None)  # turn 0 is always reached
    status, exec_match, gold_rows, gold_columns = execution_match(worded, sql, gold, wanted)
    graded = None if wanted is None else positions(gold_columns, wanted) or []
    coverage, missed_points = answer_coverage(task, answer, gold_rows, traj.language, graded)
    correct = exec_match if task.answerable else (sql is None and bool(REFUSAL.search(answer)))
    followups_correct, followups_coverage = _followup_scores(task, traj, answers, gold)
    precision, recall, order_ok = expected_call_scores(task, traj)
    stated, unsupported = unsupported_numbers(traj)
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
        **_call_counts(calls),
        expected_precision=precision,
        expected_recall=recall,
        order_ok=order_ok,
        clarification_correct=_clarification_correct(task, traj),
        answer_coverage=coverage,
        missed_points=missed_points,
        judged_text_coverage=judged_coverage(task, traj.final_answer, traj.language, judge),
        numbers_stated=stated,
        unsupported_numbers=unsupported,
        clarification_needed=task.type is TaskType.clarification,
        clarification_rounds=len(traj.clarifications),
        first_attempt_correct=_first_attempt_correct(worded, traj, gold, wanted, exec_match, sql),
        **vars(score_state(task, traj)),
        declares_order=any(c.after for turn in task.turns for c in turn.expected_tool_calls),
        turn_correct=[correct, *followups_correct],
        turn_coverage=[coverage, *followups_coverage],
        stop_reason=traj.stop_reason,
        latency_s=_latency_s(traj),
        prompt_tokens=sum(s.prompt_tokens for s in traj.steps),
        completion_tokens=sum(s.completion_tokens for s in traj.steps),
        final_sql=traj.final_sql,
        graded_sql=sql,
    )
