"""Issue 23, repeats and comparison for real: best-of-k, pass^k and consistency over a run's k repeats
with CIs that resample tasks (on hand-made scores, and a real `evalpkg run --repeats 3`), and
`evalpkg compare` of two real runs, its numbers checked against the runs' stored scores."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evalpkg.pipeline import store
from evalpkg.pipeline.metrics import PAIRED_MEASURES, breakdown, flat_metrics, paired_measures, repeat_metrics
from evalpkg.pipeline.run import Scored
from evalpkg.pipeline.score import InstanceScore
from evalpkg.settings import Settings
from evalpkg.sync.runner import SyncReport
from tests.pipeline.cdp import Browser
from tests.pipeline.helpers import run_agent
from tests.pipeline.test_metrics import score
from tests.pipeline.test_report import FIRST_SCREEN

T, F = True, False


def repeated(outcomes: dict[str, list[bool]], **kw: Any) -> list[InstanceScore]:
    """Scores of task variants, keyed 'task' or 'task:language', one per repeat in order."""
    out = []
    for variant, results in outcomes.items():
        task, _, language = variant.partition(":")
        for r, ok in enumerate(results):
            iid = f"{task}:{language or 'zh'}:plain:r{r}"
            out.append(score(iid, task_id=task, language=language or "zh", repeat=r, correct=ok, **kw))
    return out


@pytest.mark.parametrize(
    ("outcomes", "best", "pass_all", "consistency"),
    [
        pytest.param({"a": [T, T, T]}, 1.0, 1.0, 1.0, id="all-right-agree"),
        pytest.param({"a": [F, F, F]}, 0.0, 0.0, 1.0, id="all-wrong-also-agree"),
        pytest.param({"a": [T, F, T]}, 1.0, 0.0, 0.0, id="one-flip-breaks-pass-and-consistency"),
        pytest.param({"a": [T, T, T], "b": [T, F, F], "c": [F, F, F]}, 2 / 3, 1 / 3, 2 / 3, id="three-tasks"),
        pytest.param({"a:zh": [T, T], "a:en": [T, F]}, 1.0, 0.5, 0.5, id="each-language-is-its-own-variant"),
        pytest.param({"a": [T], "b": [F]}, 0.5, 0.5, None, id="one-repeat-has-no-consistency"),
    ],
)
def test_best_of_k_pass_all_k_and_consistency(
    outcomes: dict[str, list[bool]], best: float, pass_all: float, consistency: float | None
) -> None:
    m = repeat_metrics(repeated(outcomes))
    assert m["repeats"] == max(len(v) for v in outcomes.values())
    assert m["best_of_k"] == pytest.approx(best) and m["pass_all_k"] == pytest.approx(pass_all)
    assert m.get("consistency") == (None if consistency is None else pytest.approx(consistency))


@pytest.mark.parametrize(
    ("outcomes", "degenerate"),
    [
        # one task: every resample is that task, so its variants' spread cannot widen the interval
        pytest.param({"a:zh": [T, T, T], "a:en": [T, F, F]}, True, id="one-task-two-variants-no-width"),
        pytest.param({"a": [T, T, T], "b": [T, F, F], "c": [F, F, F], "d": [T, T, F]}, False, id="tasks-differ"),
    ],
)
def test_repeat_cis_resample_tasks_not_repeats(outcomes: dict[str, list[bool]], degenerate: bool) -> None:
    m = repeat_metrics(repeated(outcomes))
    for name in ("best_of_k", "pass_all_k", "consistency"):
        lo, hi = m[f"{name}_ci_low"], m[f"{name}_ci_high"]
        assert lo <= m[name] <= hi
        assert (lo == hi) == (degenerate or m[name] in (0.0, 1.0)), (name, lo, hi)


@pytest.mark.parametrize(
    ("repeats", "logged"),
    [
        pytest.param(3, True, id="k3-best-pass-consistency-with-cis-overall-and-per-type"),
        pytest.param(1, False, id="k1-none-of-them-they-are-the-accuracy-again"),
    ],
)
def test_mlflow_metrics_carry_repeat_measures_overall_and_per_type(repeats: int, logged: bool) -> None:
    flat = flat_metrics(breakdown(repeated({"a": [T, F, T][:repeats], "b": [T, T, T][:repeats]})))
    per_type = {
        k for k in flat if k.startswith("type.time_series.") and k.split(".")[-1].startswith(("best", "pass", "cons"))
    }
    expected = {
        f"type.time_series.{m}{e}"
        for m in ("best_of_k", "pass_all_k", "consistency")
        for e in ("", "_ci_low", "_ci_high")
    }
    assert per_type == (expected if logged else set())
    assert ("consistency" in flat) == logged and flat.get("pass_all_k") == (0.5 if logged else None)


def exact_binomial_p(a_better: int, b_better: int) -> float:
    """Two-sided exact McNemar p, written out: twice the smaller tail of Binomial(n, 1/2), at most 1."""
    n = a_better + b_better
    tail = sum(math.comb(n, i) for i in range(min(a_better, b_better) + 1)) / float(2**n)
    return min(1.0, 2 * tail)


@pytest.mark.parametrize(
    ("a", "b", "pairs", "a_better", "b_better"),
    [
        pytest.param(
            repeated({"t": [T, T, T], "u": [T, T, T]}),
            repeated({"t": [F, F, F], "u": [T, T, F]}),
            6, 4, 0, id="b-loses-four-of-six",
        ),
        pytest.param(
            repeated({"t": [T, T, T]}),
            [s.model_copy(update={"instance_id": f"other-run/{s.instance_id}"}) for s in repeated({"t": [F, T, T]})],
            3, 1, 0, id="paired-by-what-the-instance-is-not-its-id",
        ),
        pytest.param(
            repeated({"t": [T, T]}),
            repeated({"t": [F, F, F]})[2:],
            0, 0, 0, id="another-repeat-is-not-a-pair",
        ),
    ],
)  # fmt: skip
def test_paired_accuracy_and_exact_mcnemar(
    a: list[InstanceScore], b: list[InstanceScore], pairs: int, a_better: int, b_better: int
) -> None:
    m = paired_measures(a, b)
    if not pairs:
        assert m == {}
        return
    acc = m["accuracy"]
    assert (acc["instances"], acc["a_better"], acc["b_better"]) == (pairs, a_better, b_better)
    assert acc["difference"] == pytest.approx((b_better - a_better) / pairs)
    assert acc["mcnemar_p"] == pytest.approx(exact_binomial_p(a_better, b_better))
    assert set(m) >= {"accuracy", "exec_match", "executable_sql_rate", "expected_call_recall"}


def test_a_fractional_measure_gets_the_exact_sign_test() -> None:
    a = repeated({"t": [T, T, T], "u": [T]}, expected_recall=1.0)
    b = [s.model_copy(update={"expected_recall": 0.5 if s.task_id == "t" else 1.0}) for s in a]
    recall = paired_measures(a, b)["expected_call_recall"]
    assert (recall["a_better"], recall["b_better"]) == (3, 0) and recall["difference"] == pytest.approx(-3 / 8)
    assert recall["mcnemar_p"] == pytest.approx(exact_binomial_p(3, 0)) == 0.25


# ---- real runs -----------------------------------------------------------------------------------------

LIMIT = 24  # a stratified sample: every task type, most of the 21 cells
ONE_VARIANT = {"languages": ["zh"], "complexities": ["plain"], "reference_worlds": False}


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALPKG_")} | {
        "EVALPKG_STATE_DIR": str(settings.state_dir),
        "EVALPKG_PG_PORT": str(settings.pg_port),
        "EVALPKG_TASKS_DIR": str(settings.tasks_dir),
    }
    return subprocess.run(
        [sys.executable, "-m", "evalpkg", *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )


def stored_scores(settings: Settings, run_id: str) -> list[InstanceScore]:
    path = store.run_dir(settings, run_id) / "scores.jsonl"
    return [InstanceScore.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_gold_run_with_three_repeats_end_to_end(synced: SyncReport, generated: Settings) -> None:
    proc = cli(
        generated,
        *("run", "--agent", "gold", "--repeats", "3", "--limit", "10", "--language", "zh", "--complexity", "plain"),
        *("--no-reference-worlds", "--no-track"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = Path(proc.stdout.strip().removeprefix("report: "))
    run_id = report.parent.name
    scores = stored_scores(generated, run_id)
    variants = Counter((s.task_id, s.language, s.complexity) for s in scores)
    assert len(variants) == 10 and set(variants.values()) == {3}  # 3x the instances
    assert {s.repeat for s in scores} == {0, 1, 2}
    table = breakdown(scores)
    o = table["overall"]
    assert o["best_of_k"] == o["pass_all_k"] == o["consistency"] == 1.0 and o["repeats"] == 3.0
    lines = proc.stderr.splitlines()
    full = "best-of-3 100.0% (95% CI 100.0%-100.0%), pass^3 100.0% (95% CI 100.0%-100.0%), consistency 100.0%"
    assert f"overall: {full} (95% CI 100.0%-100.0%)" in lines, proc.stderr[-2000:]
    types = sorted(g for g in table if g.startswith("type."))
    assert [line.split(":")[0] for line in lines if line.startswith("type.")] == types
    accuracy = next(line for line in lines if line.startswith("accuracy "))  # follow-up dialogues may come after
    assert accuracy.startswith("accuracy 100.0%") and "over 30 instances" in accuracy
    flat = flat_metrics(table)  # what the run logs to MLflow
    assert all(flat[f"{t}.pass_all_k"] == 1.0 and f"{t}.consistency_ci_low" in flat for t in types)
    html = report.read_text(encoding="utf-8")
    assert "<th>consistency</th>" in html and "1.000 [1.000, 1.000]" in html


@pytest.fixture(scope="module")
def gold_and_perturbed(synced: SyncReport, generated: Settings) -> tuple[tuple[str, Scored], tuple[str, Scored]]:
    gold = run_agent(generated, "gold", limit=LIMIT, **ONE_VARIANT)
    perturbed = run_agent(generated, "perturb:wrong_time_field", limit=LIMIT, **ONE_VARIANT)
    return gold, perturbed


def compare_rows(stdout: str) -> dict[tuple[str, str], list[str]]:
    """(group, measure) -> [n, A, B, B-A, CI, A>B, B>A, p] from the table `evalpkg compare` prints."""
    rows = [line.split() for line in stdout.splitlines()[2:] if line.strip()]
    assert all(len(r) == 10 for r in rows), stdout
    return {(r[0], r[1]): r[2:] for r in rows}


def test_compare_two_real_runs_matches_their_stored_scores(
    gold_and_perturbed: tuple[tuple[str, Scored], tuple[str, Scored]], generated: Settings
) -> None:
    (run_a, _), (run_b, _) = gold_and_perturbed
    proc = cli(generated, "compare", run_a, run_b)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = compare_rows(proc.stdout)
    # independently, from what each run stored: pairs by (task, language, complexity, repeat)
    a = {(s.task_id, s.language, s.complexity, s.repeat): s for s in stored_scores(generated, run_a)}
    b = {(s.task_id, s.language, s.complexity, s.repeat): s for s in stored_scores(generated, run_b)}
    assert a.keys() == b.keys() and len(a) == LIMIT

    def check(group: str, keys: list[Any]) -> int:
        correct_a, correct_b = sum(a[k].correct for k in keys), sum(b[k].correct for k in keys)
        only_a = sum(a[k].correct and not b[k].correct for k in keys)
        only_b = sum(b[k].correct and not a[k].correct for k in keys)
        n, _, _, diff, ci, a_better, b_better, p = rows[(group, "accuracy")]
        assert int(n) == len(keys) and (int(a_better), int(b_better)) == (only_a, only_b)
        assert float(diff) == pytest.approx((correct_b - correct_a) / len(keys), abs=5e-4)
        low, high = (float(x) for x in ci.strip("[]").split(","))
        assert low <= float(diff) <= high
        assert float(p) == pytest.approx(exact_binomial_p(only_a, only_b), rel=5e-3)
        return only_a

    broken = check("overall", list(a))
    assert broken >= 6 and float(rows[("overall", "accuracy")][-1]) < 0.05  # the perturbation breaks many tasks
    types = sorted({s.type for s in a.values()})
    for t in types:  # a paired difference per task type
        check(f"type.{t}", [k for k, s in a.items() if s.type == t])
    # every paired measure the scores hold is compared overall, each with its CI and p
    held = {name for name, m in PAIRED_MEASURES.items() if any(m(s) is not None for s in a.values())}
    assert {m for g, m in rows if g == "overall"} == held >= {"accuracy", "exec_match", "expected_call_recall"}
    assert {g for g, _ in rows} == {"overall", *(f"type.{t}" for t in types)}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(("--by-type", "speed"), 2, "--by-type: expected one of accuracy, ", id="unknown-measure"),
        pytest.param(("--other-run",), 1, "share no instance (task, language, complexity, repeat)", id="no-pairs"),
    ],
)
def test_compare_errors_are_one_line(
    gold_and_perturbed: tuple[tuple[str, Scored], tuple[str, Scored]],
    generated: Settings,
    args: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    (run_a, _), (run_b, _) = gold_and_perturbed
    if args == ("--other-run",):  # the same agent asked in English: no instance of A is one of these
        run_b, _ = run_agent(
            generated, "gold", limit=2, languages=["en"], complexities=["plain"], reference_worlds=False
        )
        args = ()
    proc = cli(generated, "compare", run_a, run_b, *args)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code and len(lines) == 1, proc.stderr
    assert lines[0].startswith("evalpkg: error: ") and message in lines[0]


def test_the_leaderboard_ranks_scored_runs_and_marks_what_is_not_comparable(
    gold_and_perturbed: tuple[tuple[str, Scored], tuple[str, Scored]], generated: Settings, tmp_path: Path
) -> None:
    (gold_run, _), (perturbed_run, _) = gold_and_perturbed
    config, _, snapshot, instances = store.load_run(generated, gold_run)
    other = f"{gold_run}-other-set"  # the gold run's scores, as if made on another test set
    store.create_run(generated, other, config, "v0", snapshot, instances)
    store.save_scores(generated, other, store.saved_scores(generated, gold_run))
    proc = cli(generated, "leaderboard", perturbed_run, gold_run, other)
    assert proc.returncode == 0, proc.stderr[-2000:]
    header, *rows = proc.stdout.splitlines()
    assert header.split()[:4] == ["run", "model", "design", "test"]
    runs = [r.split()[0] for r in rows if r and not r.startswith("*")]
    assert runs == [gold_run, perturbed_run, other]  # comparable runs best first, the other set last
    accuracy = {r.split()[0]: r.split()[4] for r in rows if r and not r.startswith("*")}
    for run in (gold_run, perturbed_run):
        stored = stored_scores(generated, run)
        assert accuracy[run] == f"{sum(s.correct for s in stored) / len(stored):.1%}"
    assert f"{other} *" in proc.stdout and "not comparable" in proc.stdout.splitlines()[-1]

    # the page beside the reports, as a person sees it: one screen, nothing scrolled sideways, the run
    # that is not comparable greyed
    page = generated.state_dir / "runs" / "leaderboard.html"
    with Browser(tmp_path / "profile") as browser:
        browser.send("Page.enable")
        browser.send("Emulation.setDeviceMetricsOverride", **FIRST_SCREEN, deviceScaleFactor=1, mobile=False)
        browser.send("Page.navigate", url=page.as_uri())
        browser.wait_for("Page.loadEventFired")
        shown = browser.evaluate(
            "[...document.querySelectorAll('tr')].slice(1).map(r => [r.cells[0].textContent, r.cells[4].childNodes[0].textContent,"
            " getComputedStyle(r.cells[4]).color, r.getBoundingClientRect().bottom <= window.innerHeight])"
        )
        assert browser.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    black, grey = "rgb(0, 0, 0)", "rgb(136, 136, 136)"
    assert [(run, color, seen) for run, _, color, seen in shown] == [
        (gold_run, black, True),
        (perturbed_run, black, True),
        (f"{other} *", grey, True),
    ]
    assert [a for _, a, _, _ in shown[:2]] == [accuracy[gold_run], accuracy[perturbed_run]]
