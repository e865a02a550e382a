from __future__ import annotations

from django.urls import path

from apps.workbench import views

urlpatterns = [
    path("", views.home, name="home"),
    path("t/<slug:team>/workers/", views.workers, name="workers"),
    path("t/<slug:team>/workers/check/", views.workers_check, name="workers-check"),
    path("t/<slug:team>/<slug:section>/", views.section, name="section"),
]
