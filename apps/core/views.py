"""The error pages: a 4xx a page refuses with, a 400 for a request that cannot be read and a
404 that say why, and the server-error handler (a database that cannot be reached is a 503 that
says so)."""

from __future__ import annotations

import sys

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import Resolver404, ResolverMatch, resolve
from django.views.decorators.csrf import requires_csrf_token
from django.views.defaults import page_not_found

RETRY_AFTER_S = 5


def database_unreachable(error: BaseException | None) -> bool:
    """A lost or refused database connection (not a bad query, which is a plain 500)."""
    return isinstance(error, OperationalError | InterfaceError)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Under /api/, an answer in the API's error format rather than the HTML page."""
    if request.path.startswith("/api/"):
        return api_not_found(request)
    if isinstance(exception, Resolver404):  # its message is the URL patterns tried
        exception = Resolver404(f"No page at {request.path}.")
    return page_not_found(request, exception)


def api_not_found(request: HttpRequest, *args: object, **kwargs: object) -> JsonResponse:
    """A path under /api/ that names no operation, in the API's error format: also the last
    API route, so even with DEBUG on it never shows Django's page of every URL pattern. A path
    that names one but for its trailing slash says which."""
    message = f"No API endpoint at {request.path}; /api/docs lists them."
    trimmed = request.path.rstrip("/")
    if trimmed != request.path and resolves(trimmed):
        message = f"No API endpoint at {request.path}: API paths end without a slash ({trimmed})."
    return JsonResponse({"error": {"code": "not_found", "message": message}}, status=404)


def resolves(path: str) -> bool:
    match = resolve_or_none(path)
    return match is not None and match.func is not api_not_found


def resolve_or_none(path: str) -> ResolverMatch | None:
    try:
        return resolve(path)
    except Resolver404:
        return None


@requires_csrf_token
def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A request Django could not read; under /api/, in the API's error format. Like Django's
    own handler, the page is drawn without the request: its body or query is what failed."""
    message = f"The request cannot be read: {unreadable_because(exception)}"
    if request.path.startswith("/api/"):
        return JsonResponse({"error": {"code": "invalid", "message": message}}, status=400)
    return HttpResponseBadRequest(render_to_string("400.html", {"exception": message}))


def unreadable_because(error: Exception) -> str:
    if isinstance(error, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return f"its body is over {limit} bytes (KOPE_MAX_REQUEST_BYTES)"
    if isinstance(error, TooManyFieldsSent):
        return f"it has over {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields"
    if isinstance(error, TooManyFilesSent):
        return f"it has over {settings.DATA_UPLOAD_MAX_NUMBER_FILES} files"
    if isinstance(error, MultiPartParserError):
        return f"its multipart body is malformed ({error})"
    # Other suspicious requests (a Host header not allowed, say): Django keeps their detail
    # for the log, and so does this.
    return "it is malformed"


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
