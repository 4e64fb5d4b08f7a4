"""Stage 5, cluster: failed instances grouped by where they failed (structured features) and what
went wrong (TF-IDF of error text and SQL); k chosen by silhouette; clusters named by top terms."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from evalpkg.pipeline.score import InstanceScore
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
    "null_negation",
    "unit",
    "unsupported_numbers",
    "limit_hit",
)
TIME_COLUMNS = ("cyrq", "ryrq", "ghrq", "cysj", "exec_time", "report_time", "kssj", "jssj", "zdsj")


@dataclass
class Cluster:
    cluster: int
    size: int
    name: str
    top_terms: list[str]
    examples: list[str]  # instance ids


def failure_features(score: InstanceScore, task: Task) -> dict[str, float]:
    sql = (score.final_sql or "").lower()
    gold = " ".join(task.gold_sql).lower()
    err = score.error_text.lower()
    f = dict.fromkeys(FEATURES, 0.0)
    f["no_sql"] = float(task.answerable and score.final_sql is None)
    f["sql_error"] = float("error" in err or "does not exist" in err or "syntax" in err)
    f["refused"] = float("refused" in err)
    f["wrong_result"] = float(score.status == "success" and not score.exec_match)
    f["empty_result"] = float(score.status == "success_empty" and not score.exec_match)
    f["schema_miss"] = float("does not exist" in err or "unknown table" in err)
    f["tool_choice"] = float(score.expected_recall < 1.0)
    f["tool_arguments"] = float(score.expected_precision < 1.0)
    f["clarification"] = float(not score.clarification_correct)
    gold_times = {c for c in TIME_COLUMNS if re.search(rf"\b{c}\b", gold)}
    sql_times = {c for c in TIME_COLUMNS if re.search(rf"\b{c}\b", sql)}
    f["time_column"] = float(bool(sql) and bool(gold_times) and sql_times != gold_times)
    f["null_negation"] = float(
        ("not exists" in gold or "is null" in gold) and not ("not exists" in sql or "is null" in sql)
    )
    f["unit"] = float("mg/dl" in gold and "mg/dl" not in sql and bool(sql))
    f["unsupported_numbers"] = float(score.answer_coverage is not None and score.answer_coverage < 1.0)
    f["limit_hit"] = float(score.stop_reason not in ("final_answer",))
    return f


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
    matrix = hstack([csr_matrix(feats * 2.0), text_matrix]).tocsr()
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
    vocab = np.array(FEATURES + tuple(tfidf.get_feature_names_out()))
    clusters = []
    for c in sorted(set(labels.tolist())):
        members = [i for i, lab in enumerate(labels) if lab == c]
        centroid = np.asarray(matrix[members].mean(axis=0)).ravel()
        top = [str(t) for t in vocab[np.argsort(-centroid)[:4]] if centroid[list(vocab).index(t)] > 0]
        clusters.append(
            Cluster(c, len(members), " / ".join(top[:3]) or "other", top, [failed[i].instance_id for i in members[:5]])
        )
    return clusters, {failed[i].instance_id: int(lab) for i, lab in enumerate(labels)}
