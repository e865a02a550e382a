from __future__ import annotations

from django.urls import path

from apps.devices import views

urlpatterns = [
    path("t/<slug:team>/operators/<slug:slug>/evaluations/", views.kernel_trials,
         name="kernel-trials"),
    path("t/<slug:team>/operators/<slug:slug>/evaluations/new/", views.kernel_evaluate,
         name="kernel-evaluate"),
    path("t/<slug:team>/operators/<slug:slug>/evaluations/<int:trial_id>/", views.kernel_trial,
         name="kernel-trial"),
]  # fmt: skip
