from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture
def new_workdir() -> Iterator[Callable[[], Path]]:
    """Not tmp_path: pytest's base temp dir is 0700 and root's, so `nobody` could not enter it."""
    made: list[Path] = []

    def make() -> Path:
        path = Path(tempfile.mkdtemp(prefix="jail-test-"))
        path.chmod(0o777)
        made.append(path)
        return path

    yield make
    for path in made:
        shutil.rmtree(path)


@pytest.fixture
def workdir(new_workdir: Callable[[], Path]) -> Path:
    return new_workdir()
