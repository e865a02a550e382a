"""The root NinjaAPI: each app contributes a router; DomainError becomes a 4xx here."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from apps.accounts.api import router as accounts_router
from apps.core.api_auth import API_AUTH
from apps.core.errors import DomainError
from apps.devices.api import router as devices_router
from apps.memory.api import router as memory_router
from apps.operators.api import router as operators_router
from apps.runs.api import router as runs_router

api = NinjaAPI(
    title="KOPE Workbench API",
    version="1",
    urls_namespace="api",
    auth=API_AUTH,
)
api.add_router("/", accounts_router)
api.add_router("/", devices_router)
api.add_router("/", operators_router)
api.add_router("/", memory_router)
api.add_router("/", runs_router)


def error_body(code: str, message: str, **extra: object) -> dict[str, object]:
    return {"error": {"code": code, "message": message, **extra}}


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


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, error: HttpError) -> HttpResponse:
    return api.create_response(
        request, error_body(f"http_{error.status_code}", str(error)), status=error.status_code
    )
