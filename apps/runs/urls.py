from __future__ import annotations

from django.urls import path

from apps.runs import views

urlpatterns = [
    path("t/<slug:team>/sessions/", views.session_list, name="sessions"),
    path("t/<slug:team>/sessions/new/", views.session_launch, name="session-launch"),
    path("t/<slug:team>/sessions/<int:session_id>/", views.session_detail, name="session"),
    path(
        "t/<slug:team>/sessions/<int:session_id>/<str:action>/",
        views.session_control,
        name="session-control",
    ),
]
