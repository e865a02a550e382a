from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from apps.core.errors import DomainError, NotFound, PermissionDenied
from apps.core.views import refused


class DomainErrorMiddleware:
    """Pages: a DomainError from a view becomes Django's 404/403 handling, or an error page."""

    def __init__(self, get_response):  # type: ignore[no-untyped-def]
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)  # type: ignore[no-any-return]

    def process_exception(self, request: HttpRequest, error: Exception) -> HttpResponse | None:
        if isinstance(error, NotFound):
            raise Http404(error.message)
        if isinstance(error, PermissionDenied):
            raise DjangoPermissionDenied(error.message)
        if isinstance(error, DomainError):
            return refused(request, error.message, error.status)
        return None


class NulRefusingMiddleware:
    """A NUL character in the URL path or query is a 400 naming where, before any view looks
    it up: PostgreSQL text cannot hold one, so the lookup would be a 500."""

    def __init__(self, get_response):  # type: ignore[no-untyped-def]
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        where = nul_in_url(request)
        if where is None:
            return self.get_response(request)  # type: ignore[no-any-return]
        message = f"{where} holds a NUL character, which cannot be stored"
        if request.path.startswith("/api/"):
            return JsonResponse({"error": {"code": "invalid", "message": message}}, status=400)
        return refused(request, message)


def nul_in_url(request: HttpRequest) -> str | None:
    if "\x00" in request.path:
        return "path"
    for key, values in request.GET.lists():
        if "\x00" in key:
            return f"query key {key!r}"
        if any("\x00" in value for value in values):
            return f"query.{key}"
    return None
