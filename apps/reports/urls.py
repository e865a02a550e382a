from __future__ import annotations

from django.urls import path

from apps.reports import views

urlpatterns = [
    path("t/<slug:team>/reports/", views.reports_page, name="reports"),
    path("t/<slug:team>/reports/new/", views.export_create, name="export-create"),
    path("t/<slug:team>/reports/import/", views.knowledge_import_view, name="knowledge-import"),
    path(
        "t/<slug:team>/reports/<int:export_id>/download/",
        views.export_download,
        name="export-download",
    ),
]
