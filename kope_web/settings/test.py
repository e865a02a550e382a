"""Test settings: fast password hashing, data under a per-run directory."""

from __future__ import annotations

import os
from pathlib import Path

# Tests get their own embedded server and broker folder, apart from a running `make run`;
# set before base reads it, and inherited by the worker processes the tests start.
os.environ.setdefault("KOPE_DATA_DIR", str(Path(__file__).resolve().parents[2] / "var" / "test"))

from kope_web.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

WORKER_PING_TIMEOUT_S = 0.2

# Static files are served from the source folders here; only production collects them.
STATIC_ROOT = None
