"""Typed readers for the environment: the only place settings read os.environ.

Each raises ImproperlyConfigured naming the variable when its value is malformed, and
each secret may instead come from a file named by <NAME>_FILE (Docker/Kubernetes secrets).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str = "") -> str:
    """A blank value reads as unset, as env files and compose's ${NAME:-} write one."""
    return os.environ.get(name, "").strip() or default


def env_bool(name: str, default: bool) -> bool:
    raw = env_str(name)
    if not raw:
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use true or false.")


def env_int(name: str, default: int, *, minimum: int = 0, maximum: int = 2**31) -> int:
    raw = env_str(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer.") from None
    if not minimum <= value <= maximum:
        raise ImproperlyConfigured(f"{name}={value} is outside {minimum}..{maximum}.")
    return value


def env_float(name: str, default: float, *, minimum: float, maximum: float) -> float:
    raw = env_str(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number.") from None
    if not minimum <= value <= maximum:  # also refuses nan
        raise ImproperlyConfigured(f"{name}={value} is outside {minimum}..{maximum}.")
    return value


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def env_log_level(name: str, default: str) -> str:
    """One of LOG_LEVELS, in any case (logging itself takes only upper case)."""
    raw = env_str(name)
    if not raw:
        return default
    if raw.upper() not in LOG_LEVELS:
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a log level; use one of {', '.join(LOG_LEVELS)}."
        )
    return raw.upper()


def env_list(name: str, default: list[str]) -> list[str]:
    raw = env_str(name)
    if not raw:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choices(name: str, default: list[str], choices: tuple[str, ...]) -> list[str]:
    """A comma list of one or more of `choices`."""
    values = env_list(name, default)
    if not values or any(value not in choices for value in values):
        raise ImproperlyConfigured(
            f"{name}={env_str(name)!r} is not a comma list of {', '.join(choices)}."
        )
    return values


def env_secret(name: str, default: str = "") -> str:
    """Read NAME, or the contents of the file named by NAME_FILE."""
    file_name = env_str(f"{name}_FILE")
    if not file_name:
        return env_str(name, default)
    if env_str(name):
        raise ImproperlyConfigured(f"Set either {name} or {name}_FILE, not both.")
    try:
        with open(file_name, encoding="utf-8") as secret_file:
            return secret_file.read().strip()
    except OSError as error:
        raise ImproperlyConfigured(
            f"{name}_FILE={file_name!r} cannot be read: {error.strerror}."
        ) from None


def env_database_url(name: str) -> dict[str, object] | None:
    """Parse postgres://user:password@host:port/dbname?sslmode=... into a DATABASES entry."""
    raw = env_secret(name)
    if not raw:
        return None
    parts = urlsplit(raw)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(
            f"{name} must start with postgresql:// (got scheme {parts.scheme!r})."
        )
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ImproperlyConfigured(f"{name} names no database (postgresql://host/DBNAME).")
    query = dict(pair.split("=", 1) for pair in parts.query.split("&") if "=" in pair)
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{name} has a port that is not a number.") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": database,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": unquote(query.pop("host", parts.hostname or "")),
        "PORT": str(port or ""),
        "OPTIONS": query,
    }


def env_redis_url(name: str) -> str:
    raw = env_secret(name)
    if raw and urlsplit(raw).scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(f"{name} must start with redis://, rediss:// or unix://.")
    return raw


def folders_made(name: str, root: Path, folders: Iterable[str]) -> None:
    """Create each folder under root, the folder the variable `name` gives, or say why not."""
    for folder in folders:
        try:
            (root / folder).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ImproperlyConfigured(
                f"{name}={str(root)!r} cannot hold {root / folder}: {error.strerror}."
            ) from None
