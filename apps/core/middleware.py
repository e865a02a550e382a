from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse

from apps.core.errors import DomainError, NotFound, PermissionDenied


class DomainErrorMiddleware:
    """Pages: a DomainError from a view becomes Django's 404/403/400 handling."""

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
            return HttpResponse(error.message, status=error.status, content_type="text/plain")
        return None
