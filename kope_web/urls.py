from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, URLResolver, include, path, re_path

from apps.accounts.views import LoginView
from apps.core.views import api_not_found
from kope_web.api import api, method_refused_as_json

NINJA_DOC_VIEWS = {"openapi-json", "openapi-view", "api-root"}
handler400 = "apps.core.views.bad_request"
handler404 = "apps.core.views.not_found"
handler500 = "apps.core.views.server_error"


def api_urls() -> tuple[list[URLPattern | URLResolver], str, str]:
    """API operations answer 401 themselves, so LoginRequiredMiddleware must not redirect them.

    The interactive docs and the OpenAPI document stay behind the login page. Every URL
    answers a method it does not take in the API's error format.
    """
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if not isinstance(pattern, URLPattern):
            continue
        pattern.callback = method_refused_as_json(pattern.callback)
        if pattern.name not in NINJA_DOC_VIEWS:
            login_not_required(pattern.callback)
    return patterns, app_name, namespace


urlpatterns = [
    path(
        "accounts/login/",
        login_not_required(LoginView.as_view()),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/", include("apps.accounts.urls")),
    path("admin/", admin.site.urls),
    path("api/", api_urls()),
    re_path(r"^api/", login_not_required(api_not_found)),  # with DEBUG on too: JSON, not HTML
    path("", include("apps.operators.urls")),
    path("", include("apps.devices.urls")),
    path("", include("apps.runs.urls")),
    path("", include("apps.memory.urls")),
    path("", include("apps.reports.urls")),  # before the workbench's catch-all section
    path("", include("apps.workbench.urls")),
]
