"""`manage.py gpu_check` and `check_kernels` meet options they cannot use with what was wrong,
before anything runs, not a traceback after the run or a report that misstates it."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command


def test_gpu_check_refuses_an_output_dir_it_cannot_write_before_it_runs(tmp_path: Path) -> None:
    """It used to evaluate every operator first and then end in a FileExistsError traceback,
    the report lost."""
    taken = tmp_path / "a-file"
    taken.write_text("")
    out = StringIO()
    reason = f"--output-dir {taken}: not a folder it can write to: "
    with pytest.raises(CommandError, match=f"^{reason}"):
        call_command("gpu_check", "--allow-interpreter", "--operators", "vector_add",
                     "--repeats", "1", "--output-dir", str(taken), stdout=out)  # fmt: skip
    assert "vector_add" not in out.getvalue()  # nothing was evaluated
