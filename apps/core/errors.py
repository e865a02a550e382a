"""The one domain error family; the API and the views turn it into a 4xx in one place each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class DomainError(Exception):
    """A request that cannot be done as asked. `code` is machine-readable."""

    status = 400
    code = "invalid"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code


class NotFound(DomainError):
    """Missing, or belonging to another team: both look the same from outside."""

    status = 404
    code = "not_found"


class Unauthenticated(DomainError):
    """Credentials that were sent and are refused (an expired API token, say)."""

    status = 401
    code = "unauthenticated"


class PermissionDenied(DomainError):
    status = 403
    code = "forbidden"


class Conflict(DomainError):
    status = 409
    code = "conflict"


class Unavailable(DomainError):
    """A service the request needs (the broker, say) is not answering: try again later."""

    status = 503
    code = "unavailable"


Bounds = Mapping[str, tuple[int, int | None]]  # name -> (lowest, highest or None for no limit)


def require_whole_numbers(what: str, bounds: Bounds, values: dict[str, Any]) -> None:
    """A DomainError naming the first of `values` that is not a whole number within its
    bounds."""
    for name, (low, high) in bounds.items():
        value = values[name]
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole or value < low or (high is not None and value > high):
            span = f"of at least {low}" if high is None else f"from {low} to {high}"
            raise DomainError(f"{what} {name} must be a whole number {span}, got {value!r}")
