"""The one domain error family; the API and the views turn it into a 4xx in one place each."""

from __future__ import annotations


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


class PermissionDenied(DomainError):
    status = 403
    code = "forbidden"


class Conflict(DomainError):
    status = 409
    code = "conflict"
