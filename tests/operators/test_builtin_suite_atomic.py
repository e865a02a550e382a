"""The built-in suite is stored all or none, however it is loaded (`make run`'s bootstrap,
the worker task, the command): a failing operator leaves no newer version of the others."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from apps.operators import builtin_suite
from apps.operators.models import Operator, Suite
from apps.operators.services import ImportProblem, builtin_suite_load


def test_a_failing_builtin_operator_stores_none_of_the_others(
    db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for slug in ("relu", "sigmoid"):  # relu is stored first (order 20, then 40)
        shutil.copytree(builtin_suite.BUILTIN_DIR / slug, tmp_path / slug)
    (tmp_path / "sigmoid" / "reference.py").write_text("def make_inputs(:\n")
    monkeypatch.setattr(builtin_suite, "BUILTIN_DIR", tmp_path)
    heard: list[str] = []

    with pytest.raises(ImportProblem, match="sigmoid"):
        builtin_suite_load(on_operator=lambda version, _: heard.append(version.operator.slug))

    assert heard == ["relu"]  # stored, then rolled back with the rest
    assert not Operator.objects.exists()
    assert not Suite.objects.exists()
