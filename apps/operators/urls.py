from __future__ import annotations

from django.urls import path

from apps.operators import views

urlpatterns = [
    path("t/<slug:team>/operators/", views.operator_list, name="operators"),
    path("t/<slug:team>/operators/<slug:slug>/", views.operator_detail, name="operator"),
    path("t/<slug:team>/operators/<slug:slug>/edit/", views.operator_edit, name="operator-edit"),
    path("t/<slug:team>/suites/", views.suite_list, name="suites"),
    path("t/<slug:team>/suites/<slug:slug>/", views.suite_detail, name="suite"),
    path("t/<slug:team>/imports/", views.import_list, name="imports"),
    path("t/<slug:team>/imports/new/", views.import_create, name="import-create"),
    path("t/<slug:team>/imports/<int:import_id>/", views.import_detail, name="import-detail"),
]
