from __future__ import annotations

import pytest

from evalpkg.agent.session import load_shared
from evalpkg.agent.tools import Shared
from evalpkg.settings import Settings
from evalpkg.sync.runner import SyncReport


@pytest.fixture(scope="session")
def shared(synced: SyncReport, generated: Settings) -> Shared:
    return load_shared(generated)
