"""`manage.py load_builtin_suite`, `import_suite` and `list_operators` as an engineer uses them:
a failure mid-way leaves nothing half-written, bad options are named."""

from __future__ import annotations

import shutil
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from apps.operators import builtin_suite
from apps.operators.models import Operator, Suite


def test_load_builtin_suite_that_fails_on_one_operator_stores_none(
    db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It stored every operator before the broken one and no suite, so the shared operators
    no longer matched the suite (a new version of some, the old of the rest), and said
    "stored" of each."""
    for slug in ("relu", "sigmoid"):  # relu is stored first (order 20, then 40)
        shutil.copytree(builtin_suite.BUILTIN_DIR / slug, tmp_path / slug)
    (tmp_path / "sigmoid" / "reference.py").write_text("def make_inputs(:\n")
    monkeypatch.setattr(builtin_suite, "BUILTIN_DIR", tmp_path)

    out = StringIO()
    with pytest.raises(
        CommandError, match=r"^built-in operator sigmoid: .*\(nothing was stored\)$"
    ):
        call_command("load_builtin_suite", stdout=out)

    assert "stored" not in out.getvalue()  # relu was never "stored": it was rolled back
    assert not Operator.objects.exists()
    assert not Suite.objects.exists()
