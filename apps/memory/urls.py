from __future__ import annotations

from django.urls import path

from apps.memory import forest_views, views

urlpatterns = [
    path("t/<slug:team>/forest/", forest_views.forest_page, name="forest"),
    path(
        "t/<slug:team>/forest/<int:case_id>/children/",
        forest_views.forest_children,
        name="forest-children",
    ),
    path("t/<slug:team>/cases/<int:case_id>/", forest_views.case_page, name="case"),
    path("t/<slug:team>/review/", views.review_queue, name="review"),
    path("t/<slug:team>/review/<int:rule_id>/", views.rule_detail, name="rule"),
    path("t/<slug:team>/review/<int:rule_id>/<str:action>/", views.rule_decide, name="rule-decide"),
]
