"""The error pages: a 4xx a page refuses with, a 404 that names what is missing, and the
server-error handler (a database that cannot be reached is a 503 that says so)."""

from __future__ import annotations

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import Resolver404
from django.views.decorators.csrf import requires_csrf_token
from django.views.defaults import page_not_found

RETRY_AFTER_S = 5


def database_unreachable(error: BaseException | None) -> bool:
    """A lost or refused database connection (not a bad query, which is a plain 500)."""
    return isinstance(error, OperationalError | InterfaceError)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Under /api/, an answer in the API's error format rather than the HTML page."""
    if request.path.startswith("/api/"):
        message = f"No API endpoint at {request.path}; /api/docs lists them."
        return JsonResponse({"error": {"code": "not_found", "message": message}}, status=404)
    if isinstance(exception, Resolver404):  # its message is the URL patterns tried
        exception = Resolver404(f"No page at {request.path}.")
    return page_not_found(request, exception)


def refused(request: HttpRequest, message: str, status: int = 400) -> HttpResponse:
    """A page's 4xx other than 403 and 404: the workbench's error page with the reason."""
    return render(request, "400.html", {"exception": message}, status=status)


@requires_csrf_token
def server_error(request: HttpRequest) -> HttpResponse:
    """Django calls this while handling the exception, so sys.exc_info() names it. Neither
    answer touches the database: no context processors, no session."""
    api = request.path.startswith("/api/")
    if not database_unreachable(sys.exc_info()[1]):
        if api:
            body = {"error": {"code": "server_error", "message": "The error was logged."}}
            return JsonResponse(body, status=500)
        return HttpResponse(render_to_string("500.html"), status=500)
    if api:
        message = f"The database cannot be reached; try again in {RETRY_AFTER_S} s."
        response: HttpResponse = JsonResponse(
            {"error": {"code": "database_unavailable", "message": message}}, status=503
        )
    else:
        response = HttpResponse(render_to_string("503.html"), status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response
