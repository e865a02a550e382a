"""The commit a session records for reproduction: git's, or KOPE_CODE_VERSION where the code is
no checkout (a Docker image)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from apps.runs.config import code_version

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def asked_afresh() -> Iterator[None]:
    """code_version is asked once per process; each test asks it under its own settings."""
    code_version.cache_clear()
    yield
    code_version.cache_clear()


def test_without_kope_code_version_the_commit_is_gits(settings) -> None:
    settings.CODE_VERSION = ""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip

    assert code_version().removesuffix("+dirty") == head


def test_kope_code_version_is_recorded_where_it_is_set(settings) -> None:
    settings.CODE_VERSION = "3f2a9c1 (image built 2026-12-05)"

    assert code_version() == "3f2a9c1 (image built 2026-12-05)"
