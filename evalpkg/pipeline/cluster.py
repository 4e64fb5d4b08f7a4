"""Stage 5, cluster: failed instances grouped by what went wrong (structured features: the agent's SQL
against each gold, the call checks, the citation check) and how it showed (TF-IDF of error text, stop
reason and task type); k chosen by silhouette; each cluster named by what its members share more than
the other failures do (a term every failure has names none)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalpkg.pipeline.score import InstanceScore
from evalpkg.sql.vocabulary import TIME_COLUMNS
from evalpkg.testset.models import Task

FEATURES = (
    "no_sql",
    "sql_error",
    "refused",
    "wrong_result",
    "empty_result",
    "schema_miss",
    "tool_choice",
    "tool_arguments",
    "clarification",
    "time_column",
    "null_handling",
    "unit",
    "aggregate",
    "unsupported_numbers",
    "limit_hit",
)
FEATURE_WEIGHT = 2.0  # a feature against a text row of L2 norm 1: where it failed outweighs its wording
# what decides whether a NULL counts: dropped (IS NOT NULL -> TRUE), added (NOT EXISTS skipping NULL results)
# or turned into a value (avg(coalesce(x, 0))) alike; by kind, as a rewrite may spell x IS NOT NULL as NOT x IS NULL
NULL_HANDLING = re.compile(r"\bis\s+(?:not\s+)?(null)\b|\bnot\s+(exists)\b|\b(coalesce)\s*\(")
# an aggregate as written, with DISTINCT or not: count(distinct patient_id) vs count(*) counts rows for patients
AGGREGATE = re.compile(r"\b(count|sum|avg|min|max)\s*\(\s*(distinct\b)?")


@dataclass
class Cluster:
    cluster: int
    size: int
    name: str
    top_terms: list[str]
    examples: list[str]  # instance ids


def failure_features(score: InstanceScore, task: Task) -> dict[str, float]:
    # the query `correct` graded, turn 0's (a dialogue's final_sql answers its last follow-up); scores from
    # before follow-ups (no turn_correct) have only final_sql
    graded = score.graded_sql if score.turn_correct else score.final_sql
    sql = (graded or "").lower()
    gold = " ".join(task.gold_sql).lower()
    err = score.error_text.lower()
    f = dict.fromkeys(FEATURES, 0.0)
    f["no_sql"] = float(task.answerable and graded is None)
    f["sql_error"] = float("error" in err or "does not exist" in err or "syntax" in err)
    f["refused"] = float("refused" in err)
    f["wrong_result"] = float(score.status == "success" and not score.exec_match)
    f["empty_result"] = float(score.status == "success_empty" and not score.exec_match)
    f["schema_miss"] = float("does not exist" in err or "unknown table" in err)
    f["tool_choice"] = float(score.expected_recall < 1.0)
    f["tool_arguments"] = float(score.expected_precision < 1.0)
    f["clarification"] = float(not score.clarification_correct)
    golds_read_time = any(_time_columns(g.lower()) for g in task.gold_sql)
    f["time_column"] = float(golds_read_time and _unlike_every_gold(sql, task, _time_columns))
    f["null_handling"] = float(_unlike_every_gold(sql, task, _null_handling))
    f["unit"] = float("mg/dl" in gold and "mg/dl" not in sql and bool(sql))
    f["aggregate"] = float(_unlike_every_gold(sql, task, _aggregates))
    # the citation check's numbers (citations.py): stated in the answer, seen in no tool result
    f["unsupported_numbers"] = float(bool(score.unsupported_numbers))
    f["limit_hit"] = float(score.stop_reason not in ("final_answer",))
    return f


def _unlike_every_gold(sql: str, task: Task, key: Callable[[str], object]) -> bool:
    """The agent's SQL differs from each gold (any one is acceptable) in what `key` reads from it."""
    return bool(sql) and bool(task.gold_sql) and all(key(sql) != key(g.lower()) for g in task.gold_sql)


def _time_columns(sql: str) -> set[str]:
    return {c for c in TIME_COLUMNS if re.search(rf"\b{c}\b", sql)}


def _null_handling(sql: str) -> Counter[tuple[str, ...]]:
    return Counter(NULL_HANDLING.findall(sql))


def _aggregates(sql: str) -> set[str]:
    return {" ".join(m.group(0).replace("(", " ( ").split()) for m in AGGREGATE.finditer(sql)}


def cluster_failures(
    scores: list[InstanceScore], tasks: dict[str, Task], seed: int = 0, max_k: int = 8
) -> tuple[list[Cluster], dict[str, int]]:
    from scipy.sparse import csr_matrix, hstack
    from sklearn.cluster import KMeans
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics import silhouette_score

    failed = [s for s in scores if not s.correct]
    if not failed:
        return [], {}
    feats = np.array([[failure_features(s, tasks[s.task_id])[k] for k in FEATURES] for s in failed])
    texts = [
        f"{s.error_text} {s.stop_reason} {s.type} " + " ".join(k for k, v in zip(FEATURES, row, strict=True) if v)
        for s, row in zip(failed, feats, strict=True)
    ]
    tfidf = TfidfVectorizer(max_features=300, token_pattern=r"[A-Za-z_][A-Za-z_]+")
    text_matrix = tfidf.fit_transform(texts)
    matrix = hstack([csr_matrix(feats * FEATURE_WEIGHT), text_matrix]).tocsr()
    if len(failed) < 3:
        labels = np.zeros(len(failed), dtype=int)
    else:
        best = (-2.0, np.zeros(len(failed), dtype=int))
        for k in range(2, min(max_k, len(failed) - 1) + 1):
            candidate = KMeans(n_clusters=k, n_init=5, random_state=seed).fit_predict(matrix)
            if len(set(candidate)) < 2:
                continue
            quality = silhouette_score(matrix, candidate)
            if quality > best[0]:
                best = (float(quality), candidate)
        labels = best[1]
    clusters = []
    for c in sorted(set(labels.tolist())):
        members = [i for i, lab in enumerate(labels) if lab == c]
        top = _shared_terms(matrix, labels == c, FEATURES + tuple(tfidf.get_feature_names_out()))
        clusters.append(
            Cluster(c, len(members), " / ".join(top[:3]) or "other", top, [failed[i].instance_id for i in members[:5]])
        )
    return clusters, {failed[i].instance_id: int(lab) for i, lab in enumerate(labels)}


def _shared_terms(matrix: Any, inside: np.ndarray, vocab: tuple[str, ...], n: int = 4) -> list[str]:
    """What a cluster's members share: the features most of them have, then text terms, each ranked by how
    much more the members have it than the other failures (a term every failure has names no cluster); a
    feature and the same word in the text count once. With no other failures, by weight alone."""
    mean_in = np.asarray(matrix[inside].mean(axis=0)).ravel()
    mean_out = np.asarray(matrix[~inside].mean(axis=0)).ravel() if (~inside).any() else np.zeros_like(mean_in)
    lift = mean_in - mean_out
    nf = len(FEATURES)
    features = [i for i in np.argsort(-lift[:nf], kind="stable") if mean_in[i] >= FEATURE_WEIGHT / 2]
    # a feature's name in the text stands for the feature, which has its say above
    terms = [
        nf + i for i in np.argsort(-lift[nf:], kind="stable") if mean_in[nf + i] > 0 and vocab[nf + i] not in FEATURES
    ]
    top: list[str] = []
    for i in features + terms:
        if lift[i] > 0 and vocab[i] not in top:
            top.append(vocab[i])
    return top[:n]
