"""Aggregates: overall and per type/difficulty, best-of-k and pass^k over repeats, bootstrap
confidence intervals (resampling tasks), and paired comparison of two runs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from evalpkg.pipeline.score import InstanceScore

BOOTSTRAP_SAMPLES = 1000


def _mean(values: Iterable[float]) -> float:
    v = list(values)
    return float(np.mean(v)) if v else float("nan")


def bootstrap_ci(by_task: dict[str, list[float]], seed: int = 0) -> tuple[float, float]:
    """95% interval of the mean, resampling whole tasks (variants of one task are not independent)."""
    groups = [np.asarray(v, dtype=float) for v in by_task.values() if v]
    if not groups:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    sums = np.array([g.sum() for g in groups])
    counts = np.array([len(g) for g in groups])
    idx = rng.integers(0, len(groups), size=(BOOTSTRAP_SAMPLES, len(groups)))
    means = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _group(scores: list[InstanceScore], key: Callable[[InstanceScore], str]) -> dict[str, list[InstanceScore]]:
    out: dict[str, list[InstanceScore]] = defaultdict(list)
    for s in scores:
        out[key(s)].append(s)
    return out


def _task_ci(scores: list[InstanceScore], outcome: Callable[[InstanceScore], bool]) -> tuple[float, float]:
    """The 95% CI of a rate over instances, resampling whole tasks."""
    return bootstrap_ci({t: [float(outcome(s)) for s in g] for t, g in _group(scores, lambda s: s.task_id).items()})


def repeat_metrics(scores: list[InstanceScore]) -> dict[str, float]:
    """Over the k repeats of each task variant (task x language x complexity): best-of-k (any of the k
    correct), pass^k (`pass_all_k`: all k correct) and, where k > 1, consistency (all k outcomes agree,
    right or wrong; one outcome always agrees with itself). Each with a 95% CI that resamples tasks:
    a task's variants and repeats are not independent draws."""
    variants = _group(scores, lambda s: f"{s.task_id}:{s.language}:{s.complexity}")
    k = max(len(g) for g in variants.values())
    per_task: dict[str, dict[str, list[float]]] = {
        "best_of_k": defaultdict(list),
        "pass_all_k": defaultdict(list),
        **({"consistency": defaultdict(list)} if k > 1 else {}),
    }
    for group in variants.values():
        outcomes = [s.correct for s in group]
        task = group[0].task_id
        per_task["best_of_k"][task].append(float(any(outcomes)))
        per_task["pass_all_k"][task].append(float(all(outcomes)))
        if k > 1:
            per_task["consistency"][task].append(float(len(set(outcomes)) == 1))
    out = {"repeats": float(k)}
    for name, by_task in per_task.items():
        lo, hi = bootstrap_ci(by_task)
        out |= {name: _mean(v for vs in by_task.values() for v in vs), f"{name}_ci_low": lo, f"{name}_ci_high": hi}
    return out


def summarize(scores: list[InstanceScore]) -> dict[str, float]:
    if not scores:
        return {"instances": 0}
    lo, hi = _task_ci(scores, lambda s: s.correct)
    coverage = [s.answer_coverage for s in scores if s.answer_coverage is not None]
    stated = sum(s.numbers_stated for s in scores)
    return {
        "instances": len(scores),
        "accuracy": _mean(s.correct for s in scores),
        "accuracy_ci_low": lo,
        "accuracy_ci_high": hi,
        **repeat_metrics(scores),
        "exec_match": _mean(s.exec_match for s in scores if s.answerable),
        "executable_sql_rate": _mean(s.executable_sql for s in scores if s.answerable),
        "avg_tool_calls": _mean(s.tool_calls for s in scores),
        "redundant_call_rate": _mean(s.redundant_calls / s.tool_calls if s.tool_calls else 0.0 for s in scores),
        "expected_call_precision": _mean(s.expected_precision for s in scores),
        "expected_call_recall": _mean(s.expected_recall for s in scores),
        "clarification_accuracy": _mean(s.clarification_correct for s in scores if s.clarification_needed),
        "unnecessary_question_rate": _mean(s.clarification_rounds > 0 for s in scores if not s.clarification_needed),
        "clarification_rounds_mean": _mean(s.clarification_rounds for s in scores),
        "answer_point_coverage": _mean(c for c in coverage),
        "judged_text_coverage": _mean(s.judged_text_coverage for s in scores if s.judged_text_coverage is not None),
        "numeric_citation_error_rate": sum(len(s.unsupported_numbers) for s in scores) / stated if stated else 0.0,
        "answers_with_unsupported_numbers": _mean(bool(s.unsupported_numbers) for s in scores),
        "first_attempt_correct_time_series": _mean(
            s.first_attempt_correct for s in scores if s.first_attempt_correct is not None
        ),
        "expected_call_order_compliance": _mean(s.order_ok for s in scores if s.declares_order),
        "latency_s_mean": _mean(s.latency_s for s in scores),
        "latency_s_p95": float(np.percentile([s.latency_s for s in scores], 95)),
        "tokens_mean": _mean(s.prompt_tokens + s.completion_tokens for s in scores),
        **_semantic(scores),
        **_dialogue_state(scores),
        **_followups(scores),
    }


def _followups(scores: list[InstanceScore]) -> dict[str, float]:
    """Over the dialogues with follow-ups graded on their own: each turn on its own (turn_accuracy, and
    per turn index turn_<i>_accuracy) and the dialogue whole (dialogue_accuracy: every turn right);
    nothing where no instance had one."""
    dialogues = [s.turn_correct for s in scores if len(s.turn_correct) > 1]
    if not dialogues:
        return {}
    out = {
        "dialogues": float(len(dialogues)),
        "dialogue_accuracy": _mean(all(turns) for turns in dialogues),
        "turn_accuracy": _mean(ok for turns in dialogues for ok in turns),
    }
    for index in range(max(len(turns) for turns in dialogues)):
        out[f"turn_{index}_accuracy"] = _mean(turns[index] for turns in dialogues if len(turns) > index)
    return out


def _dialogue_state(scores: list[InstanceScore]) -> dict[str, float]:
    """The dialogue state's measures where a run kept one (toolset emr-v1+state); nothing otherwise."""
    kept = [s for s in scores if s.questions_about_filled_slots is not None]
    if not kept:
        return {}
    slots = [s.slot_accuracy for s in kept if s.slot_accuracy is not None]
    turns = [s.turns_to_complete_state for s in kept if s.turns_to_complete_state is not None]
    return {
        "slot_accuracy": _mean(slots),
        "questions_about_filled_slots": float(sum(s.questions_about_filled_slots or 0 for s in kept)),
        "state_completion_rate": _mean(s.turns_to_complete_state is not None for s in kept),
        "turns_to_complete_state_mean": _mean(turns),
    }


def _semantic(scores: list[InstanceScore]) -> dict[str, float]:
    """Correct here and in every reference world, where measured; and the matches that hold here only."""
    measured = [s for s in scores if s.semantic_correct is not None]
    if not measured:
        return {}
    lo, hi = _task_ci(measured, lambda s: bool(s.semantic_correct))
    return {
        "semantic_accuracy": _mean(bool(s.semantic_correct) for s in measured),
        "semantic_accuracy_ci_low": lo,
        "semantic_accuracy_ci_high": hi,
        "coincidental_matches": float(sum(s.correct and not s.semantic_correct for s in measured)),
    }


def breakdown(scores: list[InstanceScore]) -> dict[str, dict[str, float]]:
    """Metrics per type, per difficulty and per type x difficulty, keyed the way MLflow shows them."""
    out: dict[str, dict[str, float]] = {"overall": summarize(scores)}
    for name, key in (
        ("type", lambda s: s.type),
        ("difficulty", lambda s: s.difficulty),
        ("cell", lambda s: f"{s.type}.{s.difficulty}"),
        ("language", lambda s: s.language),
        ("complexity", lambda s: s.complexity),
    ):
        for value, group in sorted(_group(scores, key).items()):
            out[f"{name}.{value}"] = summarize(group)
    by_complexity = [m["accuracy"] for g, m in out.items() if g.startswith("complexity.")]
    if len(by_complexity) > 1:  # the same needs phrased three ways: best minus worst
        out["overall"]["robustness_gap"] = max(by_complexity) - min(by_complexity)
    return out


REPEAT_KEYS = tuple(f"{m}{e}" for m in ("best_of_k", "pass_all_k", "consistency") for e in ("", "_ci_low", "_ci_high"))


# What MLflow's compare view lists, one row each and alphabetically: the overall measures and accuracy per
# task type; with k > 1 repeats, best-of-k, pass^k and consistency overall and per type too (with one they
# are the accuracy again, and would push the measures people compare first out of the view's first rows).
# Every other group (difficulty, language, wording, type x difficulty) and every other per-type measure is
# read in the run's table breakdown.json, not as some 180 metrics among these.
PER_TYPE_METRICS = ("accuracy", "semantic_accuracy")


def flat_metrics(table: dict[str, dict[str, float]]) -> dict[str, float]:
    """The metrics a run (or a shard's run, {"overall": its summary}) logs to MLflow."""
    out = {}
    for group, values in table.items():
        repeated = REPEAT_KEYS if values.get("repeats", 1) > 1 else ()
        if group == "overall":
            keys: tuple[str, ...] = tuple(k for k in values if k in repeated or k not in REPEAT_KEYS)
        elif group.startswith("type."):
            keys = (*PER_TYPE_METRICS, *repeated)
        else:
            continue
        for k in keys:
            v = values.get(k)
            if v is not None and np.isfinite(v):
                out[k if group == "overall" else f"{group}.{k}"] = float(v)
    return out


def breakdown_rows(table: dict[str, dict[str, float]]) -> dict[str, list[Any]]:
    """The whole breakdown as one table, a row per group (overall, type.X, cell.X.Y, ...) and a column per
    measure (None where a group has none): what MLflow shows as the run's table `breakdown.json`."""
    measures = list(dict.fromkeys(k for values in table.values() for k in values))
    return {"group": list(table), **{m: [_finite(table[g].get(m)) for g in table] for m in measures}}


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and np.isfinite(value) else None


# Instance-level measures compared pairwise by `evalpkg compare`, each with its CI and exact test (a
# measure added here is compared everywhere); None where an instance has none. Named as in summarize.
PAIRED_MEASURES: dict[str, Callable[[InstanceScore], float | None]] = {
    "accuracy": lambda s: float(s.correct),
    "exec_match": lambda s: float(s.exec_match) if s.answerable else None,
    "executable_sql_rate": lambda s: float(s.executable_sql) if s.answerable else None,
    "expected_call_precision": lambda s: s.expected_precision,
    "expected_call_recall": lambda s: s.expected_recall,
    "redundant_call_rate": lambda s: s.redundant_calls / s.tool_calls if s.tool_calls else 0.0,
    "semantic_accuracy": lambda s: None if s.semantic_correct is None else float(s.semantic_correct),
    "answer_point_coverage": lambda s: s.answer_coverage,
    "judged_text_coverage": lambda s: s.judged_text_coverage,
    "clarification_accuracy": lambda s: float(s.clarification_correct) if s.clarification_needed else None,
    "unnecessary_question_rate": lambda s: None if s.clarification_needed else float(s.clarification_rounds > 0),
    "clarification_rounds": lambda s: float(s.clarification_rounds),
    "numeric_citation_error_rate": lambda s: (
        len(s.unsupported_numbers) / s.numbers_stated if s.numbers_stated else None
    ),
    "first_attempt_correct_time_series": lambda s: (
        None if s.first_attempt_correct is None else float(s.first_attempt_correct)
    ),
    "expected_call_order_compliance": lambda s: float(s.order_ok) if s.declares_order else None,
    "slot_accuracy": lambda s: s.slot_accuracy,
    "questions_about_filled_slots": lambda s: (
        None if s.questions_about_filled_slots is None else float(s.questions_about_filled_slots)
    ),
    "turns_to_complete_state": lambda s: (
        None if s.turns_to_complete_state is None else float(s.turns_to_complete_state)
    ),
}


PairKey = tuple[str, str, str, int]


def pair_key(s: InstanceScore) -> PairKey:
    """What an instance is, whichever run made it: the same question asked the same way, the same repeat."""
    return (s.task_id, s.language, s.complexity, s.repeat)


def pairs(a: list[InstanceScore], b: list[InstanceScore]) -> list[tuple[InstanceScore, InstanceScore]]:
    """The instances of A and B paired by task, language, complexity and repeat."""
    right = {pair_key(s): s for s in b}
    return sorted(((s, right[pair_key(s)]) for s in a if pair_key(s) in right), key=lambda p: pair_key(p[0]))


def exact_mcnemar(a_better: int, b_better: int) -> float:
    """Two-sided exact McNemar p: with no difference the discordant pairs fall either way with
    probability 1/2 (binomial); on a measure that is not 0/1, the exact sign test it amounts to."""
    from scipy.stats import binomtest

    n = a_better + b_better
    return float(binomtest(b_better, n, 0.5).pvalue) if n else 1.0


def paired_measures(a: list[InstanceScore], b: list[InstanceScore]) -> dict[str, dict[str, float]]:
    """B minus A for each of PAIRED_MEASURES on the pairs where both runs have it: the mean paired
    difference, its 95% CI resampling tasks, the pairs where either is higher and the exact McNemar p."""
    matched = pairs(a, b)
    out = {}
    for name, measure in PAIRED_MEASURES.items():
        diffs: dict[str, list[float]] = defaultdict(list)
        xs, ys = [], []
        a_better = b_better = 0
        for left, right in matched:
            x, y = measure(left), measure(right)
            if x is None or y is None:
                continue
            xs.append(x)
            ys.append(y)
            diffs[left.task_id].append(y - x)
            a_better += x > y
            b_better += y > x
        if xs:
            lo, hi = bootstrap_ci(diffs)
            out[name] = {
                "instances": len(xs),
                "a": _mean(xs),
                "b": _mean(ys),
                "difference": _mean(d for ds in diffs.values() for d in ds),
                "ci_low": lo,
                "ci_high": hi,
                "a_better": a_better,
                "b_better": b_better,
                "mcnemar_p": exact_mcnemar(a_better, b_better),
            }
    return out


def paired_groups(a: list[InstanceScore], b: list[InstanceScore]) -> dict[str, dict[str, dict[str, float]]]:
    """paired_measures overall and per task type (of the paired instances)."""
    out = {"overall": paired_measures(a, b)}
    for t in sorted({s.type for s, _ in pairs(a, b)}):
        out[f"type.{t}"] = paired_measures([s for s in a if s.type == t], [s for s in b if s.type == t])
    return out
