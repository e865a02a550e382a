from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

from tests.support.case_book import CaseBook


@pytest.fixture(autouse=True, scope="package")
def hypothesis_storage_outside_the_repository(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[None]:
    """Hypothesis keeps its example database and caches in ./.hypothesis by default; these
    tests keep theirs in a temporary folder."""
    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    yield
    set_hypothesis_home_dir(None)


@pytest.fixture
def book() -> CaseBook:
    """The experience forest the policy under test reads through its tools, in memory."""
    return CaseBook()
