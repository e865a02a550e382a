"""API token format and hashing: pure functions."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import NamedTuple

TOKEN_PREFIX = "kope_"  # noqa: S105 (a marker, not a secret)


class NewToken(NamedTuple):
    prefix: str
    plaintext: str
    secret_hash: str


def make_token() -> NewToken:
    prefix = secrets.token_hex(4)
    plaintext = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    return NewToken(prefix, plaintext, hash_token(plaintext))


def hash_token(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def prefix_of(plaintext: str) -> str | None:
    """The lookup prefix of a well-formed token, else None."""
    if not plaintext.startswith(TOKEN_PREFIX):
        return None
    prefix, _, secret = plaintext[len(TOKEN_PREFIX) :].partition("_")
    if len(prefix) != 8 or not secret:
        return None
    return prefix


def token_matches(plaintext: str, secret_hash: str) -> bool:
    return hmac.compare_digest(hash_token(plaintext), secret_hash)
