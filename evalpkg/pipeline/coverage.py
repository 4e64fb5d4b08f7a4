"""Answer points: how much of what a task's gold says the final answer states. Numbers within
tolerance (percent and unit forms allowed), named cells by name, text ideas by character bigrams, all
offline and comparable across runs; an LLM judge's reading of the text points is kept apart."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from typing import Any

from evalpkg.agent.claims import NUMBER
from evalpkg.pipeline.judge import Judge
from evalpkg.testset.models import Language, Task

TEXT_POINT_THRESHOLD = 0.6
UNIT_FACTORS = {("mg/dl", "mmol/l"): 1 / 18.0, ("mmol/l", "mg/dl"): 18.0}


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


def compact_text(text: str) -> str:
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
            hit = compact_text(str(name)) in compact_text(answer)
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
