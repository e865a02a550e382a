"""`make test-fast` (pytest --fast): a test that asks for the database is not run, one that
starts a process is skipped at that moment, the rest run. The three example tests below are
what the last test runs with --fast; in the whole suite they run like any other."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.contrib.auth.models import User

from tests.fast_run import PROCESS_STARTS

ROOT = Path(__file__).resolve().parents[1]


def test_example_that_starts_a_process() -> None:
    assert subprocess.run(["true"], check=False).returncode == 0


def test_example_that_reads_the_database(db: None) -> None:
    assert not User.objects.filter(username="nobody-made-this").exists()


def test_example_that_starts_nothing() -> None:
    assert (subprocess.Popen, "__init__") in PROCESS_STARTS


def test_the_fast_run_skips_process_starts_and_leaves_out_database_tests() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--fast", "-n", "0", "-p", "no:randomly", "-p",
         "no:cacheprovider", "-rs", "-k", "example", __file__],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "KOPE_DATA_DIR": str(ROOT / "var" / "test-fast-check")},
    )  # fmt: skip

    summary = done.stdout.strip().splitlines()[-1]
    assert "1 passed, 1 skipped, 2 deselected" in summary, done.stdout[-3000:]
    assert "starts a process: left to `make test`" in done.stdout
