"""Error clustering: the failure features read what an agent's SQL and answer got wrong against the gold
(any one gold) and the citation check, and two perturbation agents' failures, mixed in one run, fall
into clusters that keep them apart and are named by what each kind of failure shares."""

from __future__ import annotations

from collections import Counter

import pytest

from evalpkg.pipeline.citations import unsupported_numbers
from evalpkg.pipeline.cluster import cluster_failures, failure_features
from evalpkg.pipeline.score import InstanceScore
from evalpkg.settings import Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release
from evalpkg.testset.models import Task
from tests.pipeline.helpers import run_agent
from tests.pipeline.test_metrics import score, trajectory
from tests.testset.test_models_and_fingerprints import task_dict

READ = ("time_column", "null_handling", "aggregate", "unsupported_numbers")  # what these cases can set
RESULT = '{"rows": [[412]]}'
DISCHARGED = "select count(distinct patient_id) from emr.t_zy_visit where cyrq >= '2024-01-01'"
ADMITTED = "select count(distinct patient_id) from emr.t_zy_visit where ryrq >= '2024-01-01'"
WITH_RESULT = "select count(distinct patient_id) from emr.t_lab_result where result_value is not null"


@pytest.mark.parametrize(
    ("golds", "final_sql", "answer", "expected"),
    [
        pytest.param([DISCHARGED], DISCHARGED, "412 patients", set(), id="the-gold-itself-sets-nothing"),
        pytest.param([DISCHARGED], ADMITTED, "412 patients", {"time_column"}, id="admission-date-for-discharge"),
        pytest.param([DISCHARGED, ADMITTED], ADMITTED, "412 patients", set(), id="the-second-gold-is-acceptable-too"),
        pytest.param(
            [WITH_RESULT], WITH_RESULT.replace("result_value is not null", "true"), "412 patients", {"null_handling"},
            id="is-not-null-dropped",
        ),
        pytest.param(
            [WITH_RESULT], WITH_RESULT.replace("result_value is not null", "not result_value is null"),
            "412 patients", set(), id="is-not-null-respelled-is-the-same-test",
        ),
        pytest.param(
            [DISCHARGED], DISCHARGED.replace("distinct patient_id", "*"), "412 patients", {"aggregate"},
            id="rows-counted-for-patients",
        ),
        pytest.param(
            [DISCHARGED], DISCHARGED, "413 patients", {"unsupported_numbers"}, id="a-number-no-tool-result-holds"
        ),
        pytest.param(
            [DISCHARGED], DISCHARGED, "412 patients since 2024", set(), id="only-numbers-the-agent-saw",
        ),
    ],
)  # fmt: skip
def test_cluster_failure_features(golds: list[str], final_sql: str, answer: str, expected: set[str]) -> None:
    task = Task.model_validate(task_dict(gold_sql=golds))
    # the numbers the citation check finds unsupported, as score_instance records them
    stated, unsupported = unsupported_numbers(trajectory(answer, RESULT))
    failed = score(
        "st-sample-001:0", correct=False, final_sql=final_sql, numbers_stated=stated, unsupported_numbers=unsupported
    )
    features = failure_features(failed, task)
    assert {k for k in READ if features[k]} == expected


def test_cluster_unsupported_numbers_is_not_answer_coverage() -> None:
    """An answer that misses answer points but states only numbers it saw cites nothing unsupported."""
    task = Task.model_validate(task_dict())
    failed = score("st-sample-001:0", correct=False, answer_coverage=0.0, unsupported_numbers=[])
    assert failure_features(failed, task)["unsupported_numbers"] == 0.0


@pytest.mark.parametrize(
    ("turn_zero_sql", "expected", "why"),
    [
        (ADMITTED, {"time_column"}, "turn 0 read the wrong date: its follow-up's right query does not hide it"),
        (DISCHARGED, set(), "turn 0 as the gold: the follow-up's other query is no defect of what correct grades"),
    ],
)
def test_cluster_reads_the_query_correct_grades_not_the_last_follow_up(
    turn_zero_sql: str, expected: set[str], why: str
) -> None:
    task = Task.model_validate(task_dict(gold_sql=[DISCHARGED]))
    followup = ADMITTED.replace("2024", "2023") if turn_zero_sql == DISCHARGED else DISCHARGED
    failed = score(
        "st-sample-001:0", correct=False, final_sql=followup, graded_sql=turn_zero_sql, turn_correct=[False, True]
    )
    features = failure_features(failed, task)
    assert {k for k in READ if features[k]} == expected, why


def _holding_most(members: dict[int, Counter[str]], agent: str) -> int:
    return max(members, key=lambda c: members[c][agent])


# two perturbation agents whose failures differ in kind: the wrong time column vs rows counted for patients
AGENTS = {"perturb:wrong_time_field": "time_column", "perturb:wrong_column": "aggregate"}
PURITY = 0.8


def test_cluster_separates_two_agents_failures_and_names_what_each_shares(
    synced: SyncReport, generated: Settings
) -> None:
    tasks = release.load(generated.tasks_dir).by_id()
    failed: list[InstanceScore] = []
    for agent in AGENTS:
        _, scored = run_agent(generated, agent, languages=["zh"], complexities=["plain"])
        # one run of both: instance ids told apart by agent
        failed += [s.model_copy(update={"instance_id": f"{agent}|{s.instance_id}"}) for s in scored.scores]
    failed = [s for s in failed if not s.correct]
    by_agent = Counter(s.instance_id.split("|")[0] for s in failed)
    assert set(by_agent) == set(AGENTS) and min(by_agent.values()) >= 10, by_agent  # both fail, enough to cluster

    clusters, assignment = cluster_failures(failed, tasks)
    members: dict[int, Counter[str]] = {c.cluster: Counter() for c in clusters}
    for iid, c in assignment.items():
        members[c][iid.split("|")[0]] += 1
    names = {c.cluster: c.name for c in clusters}
    report = [(names[c], dict(m)) for c, m in members.items()]  # shown when an assertion fails
    majority = {c: m.most_common(1)[0] for c, m in members.items()}
    assert all(n / sum(members[c].values()) >= PURITY for c, (_, n) in majority.items()), report
    dominant = {agent: _holding_most(members, agent) for agent in AGENTS}
    assert dominant["perturb:wrong_time_field"] != dominant["perturb:wrong_column"], report
    assert names[dominant["perturb:wrong_time_field"]] != names[dominant["perturb:wrong_column"]], report
    for c, (agent, _) in majority.items():  # every cluster names its agent's defect, never the other's
        other = next(feature for a, feature in AGENTS.items() if a != agent)
        assert AGENTS[agent] in names[c].split(" / ") and other not in names[c].split(" / "), report
