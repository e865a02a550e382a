from __future__ import annotations

from django.apps import AppConfig


class WorkbenchConfig(AppConfig):
    name = "apps.workbench"
    label = "workbench"
