from __future__ import annotations

from django.urls import path

from apps.memory import compare_views, forest_views, knowledge_views, profile_views, views

urlpatterns = [
    path("t/<slug:team>/forest/", forest_views.forest_page, name="forest"),
    path(
        "t/<slug:team>/forest/<int:case_id>/children/",
        forest_views.forest_children,
        name="forest-children",
    ),
    path("t/<slug:team>/cases/<int:case_id>/", forest_views.case_page, name="case"),
    path(
        "t/<slug:team>/cases/<int:case_id>/measure-again/",
        forest_views.case_measure_again,
        name="case-measure-again",
    ),
    path("t/<slug:team>/compare/", compare_views.compare_page, name="compare"),
    path("t/<slug:team>/compare/profile/", compare_views.compare_profile, name="compare-profile"),
    path("t/<slug:team>/profiles/<int:profile_id>/", profile_views.profile_page, name="profile"),
    path(
        "t/<slug:team>/profiles/<int:profile_id>/trace.json",
        profile_views.profile_trace,
        name="profile-trace",
    ),
    path("t/<slug:team>/review/", views.review_queue, name="review"),
    path("t/<slug:team>/review/<int:rule_id>/", views.rule_detail, name="rule"),
    path("t/<slug:team>/review/<int:rule_id>/<str:action>/", views.rule_decide, name="rule-decide"),
    path("t/<slug:team>/knowledge/", knowledge_views.knowledge_page, name="knowledge"),
    path(
        "t/<slug:team>/knowledge/documents/<str:key>/",
        knowledge_views.document_page,
        name="document",
    ),
    path("t/<slug:team>/hot-memory/", knowledge_views.hot_memory_page, name="hot-memory"),
]
