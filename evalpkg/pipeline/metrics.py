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


def summarize(scores: list[InstanceScore]) -> dict[str, float]:
    if not scores:
        return {"instances": 0}
    by_task = {t: [float(s.correct) for s in group] for t, group in _group(scores, lambda s: s.task_id).items()}
    lo, hi = bootstrap_ci(by_task)
    repeats = _group(scores, lambda s: f"{s.task_id}:{s.language}:{s.complexity}")
    coverage = [s.answer_coverage for s in scores if s.answer_coverage is not None]
    stated = sum(s.numbers_stated for s in scores)
    return {
        "instances": len(scores),
        "accuracy": _mean(s.correct for s in scores),
        "accuracy_ci_low": lo,
        "accuracy_ci_high": hi,
        "best_of_k": _mean(any(s.correct for s in g) for g in repeats.values()),
        "pass_all_k": _mean(all(s.correct for s in g) for g in repeats.values()),
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
    }


def _semantic(scores: list[InstanceScore]) -> dict[str, float]:
    """Correct here and in every reference world, where measured; and the matches that hold here only."""
    measured = [s for s in scores if s.semantic_correct is not None]
    if not measured:
        return {}
    return {
        "semantic_accuracy": _mean(bool(s.semantic_correct) for s in measured),
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


def flat_metrics(
    table: dict[str, dict[str, float]],
    keys: tuple[str, ...] = (
        "accuracy",
        "exec_match",
        "executable_sql_rate",
        "avg_tool_calls",
        "expected_call_recall",
        "clarification_accuracy",
        "answer_point_coverage",
        "numeric_citation_error_rate",
        "latency_s_mean",
    ),
) -> dict[str, float]:
    out = {}
    for group, values in table.items():
        for k in keys if group != "overall" else values:
            v = values.get(k)
            if v is not None and np.isfinite(v):
                out[k if group == "overall" else f"{group}.{k}"] = float(v)
    return out


# Instance-level measures compared pairwise by `evalpkg compare`; None where an instance has none.
PAIRED_MEASURES: dict[str, Callable[[InstanceScore], float | None]] = {
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
}


def paired_measures(a: list[InstanceScore], b: list[InstanceScore]) -> dict[str, dict[str, float]]:
    """B minus A for each measure on the instances where both runs have it, bootstrap CI over tasks."""
    left = {s.instance_id: s for s in a}
    right = {s.instance_id: s for s in b}
    out = {}
    for name, measure in PAIRED_MEASURES.items():
        diffs: dict[str, list[float]] = defaultdict(list)
        xs, ys = [], []
        for iid in sorted(left.keys() & right.keys()):
            x, y = measure(left[iid]), measure(right[iid])
            if x is not None and y is not None:
                xs.append(x)
                ys.append(y)
                diffs[left[iid].task_id].append(y - x)
        if xs:
            lo, hi = bootstrap_ci(diffs)
            out[name] = {"instances": len(xs), "a": _mean(xs), "b": _mean(ys), "difference": _mean(ys) - _mean(xs)}
            out[name] |= {"ci_low": lo, "ci_high": hi}
    return out


def paired(a: list[InstanceScore], b: list[InstanceScore]) -> dict[str, Any]:
    """B minus A on the instances both runs have: mean difference, bootstrap CI over tasks, and an
    exact McNemar test on the discordant pairs."""
    from scipy.stats import binomtest

    left = {s.instance_id: s for s in a}
    right = {s.instance_id: s for s in b}
    common = sorted(left.keys() & right.keys())
    diffs: dict[str, list[float]] = defaultdict(list)
    a_only = b_only = 0
    for iid in common:
        x, y = left[iid].correct, right[iid].correct
        diffs[left[iid].task_id].append(float(y) - float(x))
        a_only += x and not y
        b_only += y and not x
    lo, hi = bootstrap_ci(diffs)
    n = a_only + b_only
    p = binomtest(b_only, n, 0.5).pvalue if n else 1.0
    return {
        "instances": len(common),
        "accuracy_a": _mean(left[i].correct for i in common),
        "accuracy_b": _mean(right[i].correct for i in common),
        "difference": _mean(v for vs in diffs.values() for v in vs),
        "ci_low": lo,
        "ci_high": hi,
        "only_a_correct": a_only,
        "only_b_correct": b_only,
        "mcnemar_p": float(p),
    }
