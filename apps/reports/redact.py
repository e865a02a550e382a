"""No secret leaves in a report: every string of a report's data passes through `redacted`."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

SECRET_NAME = re.compile(r"(SECRET|PASSWORD|TOKEN|_KEY$|^KEY$)")
# A password as short as "kope" (.env.example's DATABASE_URL) is still a secret; a value of 1 to
# 3 characters would replace letters and numbers all over a report, and protects nothing.
MIN_LENGTH = 4
# A shorter secret is replaced only where it stands alone: "kope", the compose file's database
# password, is also the start of every kernel's `#include "kope_kernel.h"`.
WHOLE_WORD_BELOW = 8
FIELD_NAME = re.compile(r"[a-z][a-z0-9_]*")


def setting_secrets() -> list[str]:
    """The values of the settings that hold secrets (ANTHROPIC_API_KEY, SECRET_KEY and its
    fallbacks, ...), the database passwords and passwords inside URLs (REDIS_URL, the
    broker's), longest first."""
    found: list[str] = []
    for name in dir(settings):
        value = getattr(settings, name, None) if name.isupper() else None
        if isinstance(value, str) and name.endswith("_URL"):
            found.append(urlsplit(value).password or "")
        elif SECRET_NAME.search(name):
            values = value if isinstance(value, list | tuple) else [value]
            found += [v for v in values if isinstance(v, str)]
    found += [str(db.get("PASSWORD") or "") for db in settings.DATABASES.values()]
    return sorted({s for s in found if len(s) >= MIN_LENGTH}, key=len, reverse=True)


def redacted(data: Any, secrets: list[str]) -> Any:
    """A copy of JSON-like data with each secret replaced in every string, keys included but
    the data's own field names (lower_snake_case): a password such as "case" would otherwise
    rename "cases" and break every renderer that reads it."""
    if isinstance(data, str):
        for secret in secrets:
            data = secret_pattern(secret).sub("[redacted]", data)
        return data
    if isinstance(data, dict):
        return {k if field_name(k) else redacted(k, secrets): redacted(v, secrets)
                for k, v in data.items()}  # fmt: skip
    if isinstance(data, list | tuple):
        return [redacted(v, secrets) for v in data]
    return data


@lru_cache(maxsize=64)
def secret_pattern(secret: str) -> re.Pattern[str]:
    """Where the secret is to be replaced: anywhere, or, when short, not inside a word."""
    if len(secret) >= WHOLE_WORD_BELOW:
        return re.compile(re.escape(secret))
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(secret)}(?![A-Za-z0-9_])")


def without_secrets(text: str) -> str:
    """The text with the secret settings' values replaced (the reason an export failed)."""
    return redacted(text, setting_secrets())  # type: ignore[no-any-return]


def field_name(key: Any) -> bool:
    return isinstance(key, str) and FIELD_NAME.fullmatch(key) is not None
