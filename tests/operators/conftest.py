from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

SAMPLES = Path(__file__).resolve().parent / "samples"


@pytest.fixture
def short_reference_limits(settings: Any) -> None:
    """So the sample reference that hangs costs seconds, not the default two minutes. Not
    fewer than ten: PyTorch alone took over five seconds to start on a loaded host, and a
    sound problem was reported as hanging."""
    settings.KOPE_REFERENCE_TIMEOUT_S = 10


@pytest.fixture
def samples_copy(tmp_path: Path) -> Path:
    """A private copy of the sample problems, for tests that change files."""
    copy = tmp_path / "samples"
    shutil.copytree(SAMPLES, copy)
    return copy
