"""`Idempotency-Key` on API requests that change something: a retry gets the first answer.

A script that lost the answer to a POST (a dropped connection, a timeout) sends it again with
the same key and gets the answer the first one got, instead of a second session or token.
Keys are the user's, kept for a day. Only a success is kept: a refused request changed
nothing, so its retry runs again. Follows draft-ietf-httpapi-idempotency-key-header: 422 for a
key sent again with another request, 409 while the first is still being answered. A team's
answer is replayed only to a member of the team: one removed since gets the 404 the request
now gets (a role changed since is not checked again: what each operation needs is in its code).

Two wrappers share the work, because ninja knows the caller only after authentication and the
answer's bytes only after serialization: `claim_or_replay` runs as the operation (the user is
known), `keep_answer` around the whole of it (the response is known).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import wraps
from typing import Any, TypeVar

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.utils import timezone

from apps.accounts.models import IdempotentRequest
from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.core.errors import Conflict, DomainError

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEPT_FOR = timedelta(hours=24)
# A first request unanswered this long was in a process that died: a retry may run it again.
ABANDONED_AFTER = timedelta(minutes=5)
CHANGING_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
MAX_KEY_LENGTH = 255
ViewFunction = TypeVar("ViewFunction", bound=Callable[..., Any])
logger = logging.getLogger(__name__)


class KeyReused(DomainError):
    status = 422
    code = "idempotency_key_reused"


# The OpenAPI operation ids of the operations whose answer may not be kept.
NEVER_KEPT: set[str] = set()


def answer_never_kept(reason: str) -> Callable[[ViewFunction], ViewFunction]:
    """Marks an operation whose answer must not be stored (it holds a secret shown once):
    it refuses an Idempotency-Key rather than ignore one."""

    def mark(view: ViewFunction) -> ViewFunction:
        view.idempotency_refused = reason  # type: ignore[attr-defined]
        # ninja's default operation id: the view's module and name
        NEVER_KEPT.add(f"{view.__module__}_{view.__name__}".replace(".", "_"))
        return view

    return mark


def key_of(request: HttpRequest) -> str | None:
    """The request's key, if it is a change that carries one."""
    if request.method not in CHANGING_METHODS or HEADER not in request.headers:
        return None
    key = request.headers[HEADER]
    if not (0 < len(key) <= MAX_KEY_LENGTH and key.isascii() and key.isprintable()):
        raise DomainError(f"The {HEADER} header must be 1 to {MAX_KEY_LENGTH} printable ASCII "
                          f"characters, got {len(key)} characters")  # fmt: skip
    return key


def fingerprint(request: HttpRequest) -> str:
    """What makes two requests the same: method, path with query, and body. A multipart body
    is read by its fields and files, since a client picks a new boundary for each send, and a
    JSON body by its value, since a client may write the same object another way."""
    digest = hashlib.sha256(f"{request.method} {request.get_full_path()}\n".encode())
    if request.content_type == "multipart/form-data":
        fields = sorted(request.POST.lists())
        files = sorted((name, [upload_digest(f) for f in uploads])
                       for name, uploads in request.FILES.lists())  # fmt: skip
        digest.update(json.dumps([fields, files]).encode())
    else:
        digest.update(canonical_json(request.body) or request.body)
    return digest.hexdigest()


def canonical_json(body: bytes) -> bytes | None:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def upload_digest(upload: Any) -> list[str]:
    digest = hashlib.sha256()
    for chunk in upload.chunks():
        digest.update(chunk)
    upload.seek(0)  # the view reads it next
    return [upload.name or "", digest.hexdigest()]


def claim_or_replay(view: Callable[..., Any]) -> Callable[..., Any]:
    """Runs the operation once per key: a retry gets the kept answer instead."""

    @wraps(view)
    def once(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        key = key_of(request)
        if key is None or not request.user.is_authenticated:
            return view(request, *args, **kwargs)
        if refused := getattr(view, "idempotency_refused", None):
            raise DomainError(f"This request takes no {HEADER}: {refused}")
        kept = claim(request, int(request.user.pk), key)
        if kept is None:
            return view(request, *args, **kwargs)
        if "slug" in kwargs:  # a team's: one who has left it gets the 404 the request now gets
            membership_for(request.user, kwargs["slug"], Permission.VIEW)
        return kept

    return once


def keep_answer(run: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Keeps the answer to a request `claim_or_replay` claimed, or lets the key go."""

    @wraps(run)
    def answer_and_keep(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            response = run(request, *args, **kwargs)
        except BaseException:
            release(request)
            raise
        settle(request, response)
        return response

    return answer_and_keep


def claim(request: HttpRequest, user_id: int, key: str) -> HttpResponse | None:
    """Claims the key for this request (None), or returns the answer kept for it."""
    now = timezone.now()
    # Everyone's expired keys: a user who never comes back leaves none behind for long.
    IdempotentRequest.objects.filter(claimed_at__lt=now - KEPT_FOR).delete()
    sent = fingerprint(request)
    try:
        with transaction.atomic():
            record = IdempotentRequest.objects.create(
                user_id=user_id, key=key, method=request.method or "",
                path=request.get_full_path(), fingerprint=sent, claimed_at=now,
            )  # fmt: skip
    except IntegrityError:
        return earlier_answer(request, IdempotentRequest.objects.filter(user_id=user_id, key=key),
                              sent, now)  # fmt: skip
    request.idempotency_claim = record  # type: ignore[attr-defined]
    return None


def earlier_answer(
    request: HttpRequest, same_key: QuerySet[IdempotentRequest], sent: str, now: datetime
) -> HttpResponse | None:
    record = same_key.first()
    if record is None:  # the first one failed and let the key go a moment ago
        raise Conflict(f"A request with this {HEADER} has just failed; send it again")
    if record.fingerprint != sent:
        raise KeyReused(f"This {HEADER} was sent with another request ({record.method} "
                        f"{record.path}); a new request needs a new key")  # fmt: skip
    if record.status is not None:
        return replay(record)
    taken_over = record.claimed_at < now - ABANDONED_AFTER and IdempotentRequest.objects.filter(
        pk=record.pk, status=None, claimed_at=record.claimed_at
    ).update(claimed_at=now)
    if not taken_over:
        raise Conflict(f"The first request with this {HEADER} is still being answered; "
                       "send it again in a moment")  # fmt: skip
    request.idempotency_claim = record  # type: ignore[attr-defined]
    return None


def replay(record: IdempotentRequest) -> HttpResponse:
    response = HttpResponse(bytes(record.body), status=record.status,
                            content_type=record.content_type or None)  # fmt: skip
    response[REPLAYED_HEADER] = "true"
    return response


def settle(request: HttpRequest, response: HttpResponseBase) -> None:
    record: IdempotentRequest | None = getattr(request, "idempotency_claim", None)
    if record is None:
        return
    if not (200 <= response.status_code < 300 and isinstance(response, HttpResponse)):
        release(request)
        return
    try:
        with transaction.atomic():
            IdempotentRequest.objects.filter(pk=record.pk).update(
                status=response.status_code, content_type=response.get("Content-Type", ""),
                body=response.content,
            )  # fmt: skip
    except DatabaseError:
        # The change is made, so its answer still goes out. A retry finds the key claimed with
        # no answer: a conflict until the claim counts as lost, as after a crash.
        logger.exception("Could not keep the answer to %s %s (%s %s)", request.method,
                         request.get_full_path(), HEADER, record.key)  # fmt: skip


def release(request: HttpRequest) -> None:
    record: IdempotentRequest | None = getattr(request, "idempotency_claim", None)
    if record is None:
        return
    try:
        with transaction.atomic():
            IdempotentRequest.objects.filter(pk=record.pk, status=None).delete()
    except DatabaseError:
        # Whatever failed the request is what its client should hear; the claim counts as
        # lost after ABANDONED_AFTER.
        logger.exception("Could not let the %s %s go", HEADER, record.key)


def document_header(schema: dict[str, Any]) -> None:
    """Adds the optional header to every changing operation of an OpenAPI document."""
    parameter = {
        "in": "header", "name": HEADER, "required": False,
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH},
        "description": "Send a retry with the same key to get the first answer instead of "
        "doing it twice (kept for a day; 422 if the key came with another request, 409 while "
        "the first is still being answered).",
    }  # fmt: skip
    for operations in schema.get("paths", {}).values():
        for method, operation in operations.items():
            if method.upper() in CHANGING_METHODS and operation["operationId"] not in NEVER_KEPT:
                operation.setdefault("parameters", []).append(parameter)
