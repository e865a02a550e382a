from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import current_app


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Celery tasks queued on commit (case embeddings) run right there, as in the benchmark."""
    before = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = True
    yield
    current_app.conf.task_always_eager = before
