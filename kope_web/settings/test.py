"""Test settings: fast password hashing, data under a per-run directory."""

from __future__ import annotations

import os
from pathlib import Path


def per_test_process(data_dir: str) -> str:
    """Under pytest-xdist each test process gets a folder of its own (embedded server, broker
    queues): a worker one test starts must never take another test's task. The processes a
    test starts inherit the folder already named after their xdist worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or Path(data_dir).name == worker:
        return data_dir
    return str(Path(data_dir) / worker)


# Tests get their own embedded server and broker folder, apart from a running `make run`;
# set before base reads it, and inherited by the worker processes the tests start.
os.environ["KOPE_DATA_DIR"] = per_test_process(
    os.environ.get("KOPE_DATA_DIR") or str(Path(__file__).resolve().parents[2] / "var" / "test")
)

from kope_web.settings.base import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

WORKER_PING_TIMEOUT_S = 0.2

# Static files are served from the source folders here; only production collects them.
STATIC_ROOT = None
