"""The root NinjaAPI: each app contributes a router; DomainError becomes a 4xx here."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, RawPostDataException
from django.http.response import HttpResponseBase
from django.utils.datastructures import MultiValueDict
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.openapi.schema import OpenAPISchema
from ninja.parser import Parser
from ninja.types import DictStrAny

from apps.accounts.api import router as accounts_router
from apps.accounts.api_auth import API_AUTH
from apps.accounts.idempotency import claim_or_replay, document_header, keep_answer
from apps.core.errors import DomainError, PermissionDenied
from apps.devices.api import router as devices_router
from apps.memory.api import router as memory_router
from apps.memory.cases_api import router as cases_router
from apps.operators.api import router as operators_router
from apps.reports.api import router as reports_router
from apps.runs.api import router as runs_router


def nul_at(value: object, where: str) -> str | None:
    """Where in a parsed body or query a NUL character is (PostgreSQL text cannot hold one)."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    if isinstance(value, dict):
        items: list[tuple[str, object]] = [(f"{where}.{k}", v) for k, v in value.items()]
        items += [(f"{where} key {k!r}", k) for k in value]
    elif isinstance(value, list):
        items = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
    else:
        return None
    return next((found for at, item in items if (found := nul_at(item, at))), None)


class NulRefusingParser(Parser):
    """JSON bodies and query strings, refused whole when a string holds a NUL character: no
    field of ours can store one, and finding out at the database would be a 500."""

    def parse_body(self, request: HttpRequest) -> DictStrAny:
        if request.content_type in FORM_TYPES:
            raise form_body_refused(request)
        return refuse_nul(json_object(request.body), "body")

    def parse_querydict(
        self, data: MultiValueDict[str, Any], list_fields: list[str], request: HttpRequest
    ) -> DictStrAny:
        return refuse_nul(super().parse_querydict(data, list_fields, request), "query")


FORM_TYPES = {"multipart/form-data", "application/x-www-form-urlencoded"}
JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number",
              bool: "a boolean", type(None): "null"}  # fmt: skip


def form_body_refused(request: HttpRequest) -> DomainError:
    return DomainError("The body must be JSON (Content-Type: application/json), not "
                       f"{request.content_type}", code="http_400")  # fmt: skip


def json_object(body: bytes) -> DictStrAny:
    """The body as one JSON object, or a DomainError that says what is wrong with it (ninja's
    own answer is only "Cannot parse request body")."""
    try:
        parsed = json.loads(body, object_pairs_hook=unique_keys)
    except UnicodeDecodeError:
        reason = "it is not UTF-8 text"
    except json.JSONDecodeError as error:
        reason = str(error)
    except ValueError:  # an integer over Python's digit limit
        reason = f"a number has over {sys.get_int_max_str_digits()} digits"
    except RecursionError:
        reason = "it is nested too deeply"
    else:
        if not isinstance(parsed, dict):
            raise DomainError(f"The body must be a JSON object, not {JSON_TYPES[type(parsed)]}")
        return parsed
    # The code ninja's own answer had ("Cannot parse request body"), which scripts may match.
    raise DomainError(f"The body is not valid JSON: {reason}", code="http_400")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's keys, refused when one comes twice (json keeps the last silently)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise DomainError(f"body holds the key {key!r} twice")
        found[key] = value
    return found


def refuse_nul(parsed: DictStrAny, where: str) -> DictStrAny:
    if found := nul_at(parsed, where):
        raise DomainError(f"{found} holds a NUL character, which cannot be stored")
    return parsed


ERROR_SCHEMA = {
    "type": "object", "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["code", "message"],
        "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
    }},
}  # fmt: skip
# What any operation may answer instead of its success (docs/api.md); a change may also
# meet a conflict or a body over the limit.
ERROR_ANSWERS = {
    400: "The request cannot be read or is refused as asked (`invalid`, `http_400`, …)",
    401: "No valid credentials (`unauthenticated`), or an expired token (`token_expired`)",
    403: "The role or the token does not allow it (`forbidden`, `token_read_only`)",
    404: "No such object in the team, or no such team (`not_found`)",
    422: "A parameter or body field is not valid (`validation_error`, with details)",
    503: "The database or the broker is not answering; try again",
}
CHANGE_ANSWERS = {
    409: "The object's state refuses the action, or an Idempotency-Key is still being answered",
    413: "The body is over KOPE_MAX_REQUEST_BYTES (`request_too_large`)",
}


def document_error_answers(schema: dict[str, Any]) -> None:
    """Adds the API's error answers, in its one error format, to every operation."""
    schema["components"]["schemas"]["Error"] = ERROR_SCHEMA
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in schema["paths"].values():
        for method, operation in operations.items():
            answers = ERROR_ANSWERS | (CHANGE_ANSWERS if method != "get" else {})
            for status, description in answers.items():
                operation["responses"].setdefault(
                    status, {"description": description, "content": content}
                )


class WorkbenchAPI(NinjaAPI):
    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: DictStrAny | None = None
    ) -> OpenAPISchema:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        document_header(schema)
        document_error_answers(schema)
        return schema


api = WorkbenchAPI(
    title="KOPE Workbench API",
    version="1",
    urls_namespace="api",
    auth=API_AUTH,
    parser=NulRefusingParser(),
)
api.add_decorator(claim_or_replay, mode="operation")
api.add_decorator(keep_answer, mode="view")
api.add_router("/", accounts_router)
api.add_router("/", devices_router)
api.add_router("/", operators_router)
api.add_router("/", memory_router)
api.add_router("/", cases_router)
api.add_router("/", runs_router)
api.add_router("/", reports_router)


def error_body(code: str, message: str, **extra: object) -> dict[str, object]:
    return {"error": {"code": code, "message": message, **extra}}


View = Callable[..., HttpResponseBase]


def method_refused_as_json(view: View) -> View:
    """A URL's view, whose 405 (ninja's is plain text: no operation takes the method) is in the
    API's error format."""

    @functools.wraps(view)
    def view_with_json_405(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        if response.status_code != 405:
            return response
        allowed = ", ".join(sorted(method.strip() for method in response["Allow"].split(",")))
        message = f"{request.path} does not take {request.method}; it takes {allowed}."
        refused = JsonResponse(error_body("method_not_allowed", message), status=405)
        refused["Allow"] = allowed
        return refused

    return view_with_json_405


@api.exception_handler(DomainError)
def on_domain_error(request: HttpRequest, error: DomainError) -> HttpResponse:
    return api.create_response(request, error_body(error.code, error.message), status=error.status)


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, error: ValidationError) -> HttpResponse:
    body = error_body("validation_error", "The request is not valid.", details=error.errors)
    return api.create_response(request, body, status=422)


@api.exception_handler(AuthenticationError)
def on_auth_error(request: HttpRequest, error: AuthenticationError) -> HttpResponse:
    body = error_body("unauthenticated", "Log in, or send 'Authorization: Bearer <token>'.")
    return api.create_response(request, body, status=401)


@api.exception_handler(RequestDataTooBig)
def on_body_too_big(request: HttpRequest, error: RequestDataTooBig) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = error_body("request_too_large", f"The request body is over {limit} bytes "
                      "(KOPE_MAX_REQUEST_BYTES).", limit=limit)  # fmt: skip
    return api.create_response(request, body, status=413)


@api.exception_handler(RawPostDataException)
def on_body_already_read(request: HttpRequest, error: RawPostDataException) -> HttpResponse:
    """A form body sent where JSON belongs: the CSRF check of a logged-in browser had Django
    parse it from the request's stream, so the raw body was gone when the operation asked."""
    return on_domain_error(request, form_body_refused(request))


CSRF_REFUSED = ("The CSRF check failed: a request with the session cookie sends the csrftoken "
                "cookie's value in an X-CSRFToken header (a script sends 'Authorization: Bearer "
                "<token>' instead).")  # fmt: skip


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, error: HttpError) -> HttpResponse:
    if isinstance(error.__cause__, DomainError):  # ninja wraps what its body parser raised
        return on_domain_error(request, error.__cause__)
    if error.status_code == 403 and str(error) == "CSRF check Failed":  # ninja's words for it
        return on_domain_error(request, PermissionDenied(CSRF_REFUSED))
    return api.create_response(
        request, error_body(f"http_{error.status_code}", str(error)), status=error.status_code
    )
