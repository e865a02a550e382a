"""Single-machine development: DEBUG on, everything else as in base."""

from __future__ import annotations

from kope_web.env import env_bool
from kope_web.settings.base import *  # noqa: F403

DEBUG = env_bool("DJANGO_DEBUG", True)

# Static files are served from the source folders here; only production collects them.
STATIC_ROOT = None
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
