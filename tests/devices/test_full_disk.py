"""The work dir of the evaluator fills up (a 1 MiB tmpfs): the evaluation fails with a reason
that says so, and nothing is left behind in the work dir."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation
from apps.devices.services import evaluation_execute, evaluation_request
from tests.memory.test_compare_pages import NAIVE, small_vector_add

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 and os.environ.get("CI") != "true", reason="mounting a tmpfs needs root"
)


@pytest.fixture
def tiny_work_dir() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="kope-full-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)
        folder.rmdir()


def test_a_full_work_dir_fails_the_evaluation_with_a_clear_reason(
    db: None, tiny_work_dir: Path, settings: object
) -> None:
    settings.KOPE_EVAL_WORK_DIR = str(tiny_work_dir)  # type: ignore[attr-defined]
    options = EvalSettings(seeds=1, warmup=1, repeats=3)
    evaluation, _ = evaluation_request(version=small_vector_add(), source_text=NAIVE,
                                       options=options)  # fmt: skip
    done = evaluation_execute(evaluation.pk, max_attempts=1)
    assert done.status == Evaluation.Status.FAILED
    assert "No space left on device" in done.error and str(tiny_work_dir) in done.error
    assert "the candidate was not judged" in done.error and done.verdict is None
    assert list(tiny_work_dir.iterdir()) == []  # the work space is removed all the same
