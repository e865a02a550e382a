from __future__ import annotations

from django.apps import AppConfig


class OperatorsConfig(AppConfig):
    name = "apps.operators"
    label = "operators"
