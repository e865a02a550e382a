"""`manage.py gpu_check`: on a host without a GPU it stops with a clear message; its dry run
in Triton's interpreter writes the dated report."""

from __future__ import annotations

import shutil
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from apps.devices.gpu.device import cuda_device
from apps.operators import builtin_suite

pytestmark = pytest.mark.skipif(cuda_device() is not None, reason="a host without a GPU")


def test_without_a_cuda_device_it_stops_and_says_so(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"^no CUDA device: torch .* sees no CUDA device"):
        call_command("gpu_check", "--output-dir", str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_the_interpreter_dry_run_writes_a_dated_report(tmp_path: Path) -> None:
    out = StringIO()

    call_command("gpu_check", "--allow-interpreter", "--operators", "vector_add", "--repeats",
                 "1", "--output-dir", str(tmp_path), stdout=out)  # fmt: skip

    (report,) = tmp_path.iterdir()
    assert report.name.endswith("-no-gpu-triton-interpreter-correctness-only.md")
    text = report.read_text()
    assert text.startswith("# GPU check, ") and "| vector_add | correct x1 | - |" in text
    assert "vector_add: correct x1" in out.getvalue()


def test_an_operator_not_correct_exits_1_after_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It exited 0 with every verdict failed, so a CUDA host's check script passed whatever the
    kernels did."""
    suite = tmp_path / "builtin"
    shutil.copytree(builtin_suite.BUILTIN_DIR / "vector_add", suite / "vector_add")
    kernel = suite / "vector_add" / "naive_triton.py"
    kernel.write_text(kernel.read_text().replace("a + b, mask=mask", "a - b, mask=mask"))
    monkeypatch.setattr(builtin_suite, "BUILTIN_DIR", suite)
    reports, out = tmp_path / "reports", StringIO()

    with pytest.raises(
        CommandError, match=r"^not correct on every run: vector_add: exit status 1$"
    ):
        call_command("gpu_check", "--allow-interpreter", "--operators", "vector_add",
                     "--repeats", "1", "--output-dir", str(reports), stdout=out)  # fmt: skip

    assert "vector_add: incorrect x1" in out.getvalue()  # the report is printed and written
    (report,) = reports.iterdir()
    assert "| vector_add | incorrect x1 | - |" in report.read_text()
