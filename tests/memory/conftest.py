from __future__ import annotations

import pytest

from apps.accounts.models import Team
from tests.support.experiences import Memory


@pytest.fixture
def memory(team: Team) -> Memory:
    """The team's memory, to record cases and experiences in."""
    return Memory(team)
