"""One root error class; the CLI prints any of these as a single line and exits non-zero."""


class EvalpkgError(Exception):
    """Root of every error evalpkg raises on purpose."""


class ConfigError(EvalpkgError):
    """A setting, option or input file is missing or invalid."""


class ServiceError(EvalpkgError):
    """An embedded or external service (PostgreSQL, MLflow) is unreachable or failed to start."""


class DataError(EvalpkgError):
    """Data is missing or inconsistent (e.g. sync before generate)."""


class SyncError(EvalpkgError):
    """The de-identifying sync (dbt build or its validation) failed."""
