"""evalpkg: benchmark and batch evaluation pipeline for LLM agents over a de-identified EMR."""

from evalpkg.errors import ConfigError, DataError, EvalpkgError, ServiceError, SyncError
from evalpkg.settings import Settings, get_settings

__all__ = [
    "ConfigError",
    "DataError",
    "EvalpkgError",
    "ServiceError",
    "Settings",
    "SyncError",
    "get_settings",
]
__version__ = "0.1.0"
