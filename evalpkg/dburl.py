"""Small helpers on libpq connection URLs."""

from __future__ import annotations

from urllib.parse import quote, urlsplit, urlunsplit

from evalpkg.errors import ConfigError


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"EVALPKG_PG_URL: expected postgresql://..., got {redact(url)!r}")
    return urlunsplit(parts._replace(path="/" + database))


def with_user(url: str, user: str, password: str | None = None) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = quote(user, safe="")
    if password is not None:
        netloc += ":" + quote(password, safe="")
    netloc += "@" + host + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(":" + parts.password + "@", ":***@")))


def parts(url: str) -> dict[str, str | int | None]:
    p = urlsplit(url)
    return {
        "host": p.hostname,
        "port": p.port or 5432,
        "user": p.username,
        "password": p.password,
        "dbname": p.path.lstrip("/") or None,
    }
