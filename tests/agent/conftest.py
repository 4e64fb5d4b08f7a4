from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from evalpkg.agent.session import build_executor, build_toolkit, load_shared
from evalpkg.agent.tools import Shared, Toolkit
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.sql.executor import ReadOnlyExecutor
from evalpkg.sync.runner import SyncReport
from evalpkg.testset.models import Language, Task
from tests.testset.test_models_and_fingerprints import task_dict

if TYPE_CHECKING:
    from evalpkg.agent.model_client import ModelClient

NewToolkit = Callable[..., Toolkit]


@pytest.fixture(scope="session")
def shared(synced: SyncReport, generated: Settings) -> Shared:
    return load_shared(generated)


@pytest.fixture
def new_toolkit(generated: Settings, shared: Shared) -> Iterator[NewToolkit]:
    """Toolkits wired exactly as runs wire them (`session.build_toolkit` from a RunConfig); one executor
    per distinct config, as a shard has one, closed after the test. Defaults: a 1 s statement timeout
    (the hostile corpus sleeps), a small task, a zh question, no model client."""
    executors: dict[str, ReadOnlyExecutor] = {}

    def make(
        config: RunConfig | None = None,
        task: Task | None = None,
        language: Language = Language.zh,
        question: str = "心内科有多少出院病人",
        client: ModelClient | None = None,
    ) -> Toolkit:
        config = config or RunConfig(sql_timeout_ms=1000)
        key = config.model_dump_json()
        if key not in executors:
            executors[key] = build_executor(generated, config)
        task = task or Task.model_validate(task_dict())
        return build_toolkit(config, shared, executors[key], task, language, question, client)

    yield make
    for executor in executors.values():
        executor.close()
