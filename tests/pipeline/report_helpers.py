"""For the report tests: reading a written report back (its instance table and chunk files), and a
synthetic scored run as large as a full run with repeats, each trajectory with ~8 KB of tool results
(real ones average ~4 KB), built without a database."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from evalpkg.agent.trajectory import Step, ToolCallRecord, Trajectory, sha256_text
from evalpkg.pipeline.cluster import Cluster
from evalpkg.pipeline.report import write_report
from evalpkg.pipeline.report_files import CHUNK_CALLBACK, files_folder
from evalpkg.pipeline.report_views import ChunkFile, InstanceTable
from evalpkg.pipeline.score import InstanceScore
from evalpkg.testset.models import Complexity, Difficulty, Language, TaskType

FULL_RUN = 5_800  # 1,926 instances x 3 repeats: the run whose inlined report was ~25 MB
VARIANTS = 18
LANGUAGES, COMPLEXITIES = [v.value for v in Language], [c.value for c in Complexity]
RESULT_MARK = "ROWS-OF"  # in every tool result: the page must not hold any


def instance_table(page: Path) -> InstanceTable:
    found = re.search(r'<script type="application/json" id="instance-table">(.*?)</script>', page.read_text("utf-8"))
    assert found, f"{page} has no instance table"
    return InstanceTable.model_validate(json.loads(found.group(1)))


def chunks(page: Path) -> dict[int, ChunkFile]:
    """The chunk files of the folder the page refers to, by the index in their name."""
    folder = page.parent / instance_table(page).files
    out = {}
    for path in sorted(folder.glob("trajectories-*.js")):
        text = path.read_text("utf-8")
        assert text.startswith(CHUNK_CALLBACK + "(") and text.endswith(");\n"), path
        out[int(path.stem.split("-")[1])] = ChunkFile.model_validate_json(text[len(CHUNK_CALLBACK) + 1 : -3])
    return out


def folders(page: Path) -> list[str]:
    """Everything in the page's files folder: the one folder it refers to, once a write has finished."""
    return sorted(p.name for p in files_folder(page).iterdir())


@dataclass
class SyntheticRun:
    scores: list[InstanceScore]
    trajectories: list[Trajectory]
    clusters: list[Cluster]
    assignment: dict[str, int]

    def write(self, path: Path, run_id: str = "synthetic") -> Path:
        config = {"model": "synthetic", "agent": "gold", "testset_version": "v0"}
        return write_report(
            path, run_id, config, self.table(), self.scores, self.clusters, self.trajectories, self.assignment
        )

    def table(self) -> dict[str, dict[str, float]]:
        """The measures the page shows (metrics.breakdown's bootstrap would take seconds at this size)."""
        out: dict[str, dict[str, float]] = {}
        for group, kept in [("overall", self.scores)] + [
            (f"type.{t.value}", [s for s in self.scores if s.type == t.value]) for t in TaskType
        ]:
            out[group] = {"instances": float(len(kept)), "accuracy": sum(s.correct for s in kept) / max(1, len(kept))}
        return out


def final_sql(i: int) -> str:
    return f"select count(*) from t_lab_result where patient_id = {i} and jg < 'x'"  # '<' must survive escaping


def outcome_of(i: int) -> str:
    """correct, incorrect and error instances in every run, a few errors and many correct ones"""
    return "error" if i % 10 == 0 else "incorrect" if i % 10 in (1, 2) else "correct"


def _call(i: int, n: int) -> ToolCallRecord:
    result = f"{RESULT_MARK} {i}/{n}: " + ", ".join(f"({i}, {k}, 'value {k}')" for k in range(100))
    return ToolCallRecord(
        call_id=f"c{n}",
        name="execute_sql",
        arguments={"sql": final_sql(i)},
        ok=True,
        result=result,
        result_sha256=sha256_text(result),
        started_at="2026-01-01T00:00:00.000+00:00",
        elapsed_ms=3.0,
        sql=final_sql(i),
    )


def synthetic_run(instances: int = FULL_RUN) -> SyntheticRun:
    types, levels = list(TaskType), list(Difficulty)
    scores, trajectories, assignment = [], [], {}
    for i in range(instances):
        # a task in 2 languages x 3 complexities x 3 repeats, as a full run; ids as long as real ones
        task, variant = divmod(i, VARIANTS)
        kind, level = types[task % len(types)], levels[(task // len(types)) % len(levels)]
        language, complexity, repeat = LANGUAGES[variant % 2], COMPLEXITIES[variant // 2 % 3], variant // 6
        iid = f"{kind.value[:4]}-{kind.value}_by_department_and_month-{task:03d}:{language}:{complexity}:r{repeat}"
        outcome = outcome_of(i)
        steps = [
            Step(
                index=n,
                started_at="2026-01-01T00:00:00.000+00:00",
                ended_at="2026-01-01T00:00:01.000+00:00",
                model_text=f"step {n} of instance {i}",
                tool_calls=[_call(i, n)],
            )
            for n in range(3)
        ]
        trajectories.append(
            Trajectory(
                instance_id=iid,
                task_id=iid.split(":")[0],
                agent="gold",
                language=language,
                complexity=complexity,
                question=f"How many results has patient {i}?",
                steps=steps,
                final_answer=f"{i} results",
                final_sql=final_sql(i),
                stop_reason="max_steps" if outcome == "error" else "final_answer",
            )
        )
        scores.append(
            InstanceScore(
                instance_id=iid,
                task_id=iid.split(":")[0],
                type=kind.value,
                difficulty=level.value,
                language=language,
                complexity=complexity,
                repeat=repeat,
                answerable=True,
                status="success",
                exec_match=outcome == "correct",
                correct=outcome == "correct",
                executable_sql=True,
                tool_calls=3,
                redundant_calls=0,
                expected_precision=1.0,
                expected_recall=1.0,
                order_ok=True,
                clarification_correct=True,
                answer_coverage=1.0,
                stop_reason="max_steps" if outcome == "error" else "final_answer",
                latency_s=1.0 + i % 7,
                prompt_tokens=100,
                completion_tokens=20,
                tool_names=["execute_sql"] * 3,
                error_text="",
                final_sql=final_sql(i),
                # a dialogue state on the clarification tasks: hundreds of rows in the state section
                slot_accuracy=0.5 if kind is TaskType.clarification else None,
                questions_about_filled_slots=0 if kind is TaskType.clarification else None,
            )
        )
        if outcome != "correct":
            assignment[iid] = 0 if outcome == "error" else 1
    clusters = [
        Cluster(
            c, sum(v == c for v in assignment.values()), name, [name], [k for k, v in assignment.items() if v == c][:5]
        )
        for c, name in ((0, "limit_hit"), (1, "wrong_result"))
    ]
    return SyntheticRun(scores, trajectories, clusters, assignment)
