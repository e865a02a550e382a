from __future__ import annotations

from django.urls import path

from apps.memory import views

urlpatterns = [
    path("t/<slug:team>/review/", views.review_queue, name="review"),
    path("t/<slug:team>/review/<int:rule_id>/", views.rule_detail, name="rule"),
    path("t/<slug:team>/review/<int:rule_id>/<str:action>/", views.rule_decide, name="rule-decide"),
]
