"""Gold answers are decided by the data alone: in worlds with other de-identification keys, seeds
and sizes, the test set validates with no tie-dependent gold and no undetermined answer point, and
the gold agent is perfect on every instance and metric at concurrency > 1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evalpkg.prod.generator import generate
from evalpkg.services import bootstrap
from evalpkg.settings import PROD_DB, Settings
from evalpkg.sync.runner import run_sync
from evalpkg.testset import release
from evalpkg.testset.models import Complexity
from evalpkg.testset.validate import validate
from tests.conftest import running_cluster
from tests.pipeline.helpers import imperfections, run_agent

# (patients, seed); the session's own world (2,000 patients, seed 7, a random key) is tested in test_pipeline.
WORLDS = [pytest.param(2000, 8, id="2000-patients-seed-8"), pytest.param(3000, 5, id="3000-patients-seed-5")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Settings]:
    with running_cluster() as s:
        yield s


@pytest.mark.server  # a scratch cluster per world
@pytest.mark.parametrize(("patients", "seed"), WORLDS)
def test_gold_is_perfect_in_another_world(cluster: Settings, patients: int, seed: int) -> None:
    generate(cluster.db_url(PROD_DB), patients, seed)
    bootstrap.set_key(cluster, replace=True)  # a new random key: new pseudonyms and date shifts
    run_sync(cluster, full_refresh=True)

    report = validate(cluster)
    assert report.problems == []
    assert report.nondeterministic_golds == 0 and report.undetermined_points == 0

    _, scored = run_agent(cluster, "gold", shards=2, complexities=list(Complexity))
    tasks = release.load(cluster.tasks_dir).by_id()
    assert len(scored.scores) == 6 * len(tasks)
    assert imperfections(scored.scores, tasks) == []
