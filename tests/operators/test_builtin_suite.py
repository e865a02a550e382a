"""The built-in CPU suite loads into a fresh database; the quick kernel check can fail.

That every naive kernel passes every case under the full evaluator is shown in
tests/devices/test_evaluator.py; `manage.py check_kernels` is the quick check used here.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.core.management import call_command

from apps.devices.cpu_c.check import KernelToCheck, check_many
from apps.operators.builtin_suite import BUILTIN_SUITE_SLUG, read_builtin_suite
from apps.operators.models import Operator, OperatorVersion, Suite


def test_the_builtin_suite_loads_into_a_fresh_database(
    db: None, capsys: pytest.CaptureFixture[str]
) -> None:
    folders = read_builtin_suite()
    assert not Operator.objects.exists()

    call_command("load_builtin_suite")
    first = capsys.readouterr().out
    call_command("load_builtin_suite")
    second = capsys.readouterr().out

    assert first.count("stored ") == len(folders) and "unchanged" not in first
    assert second.count("unchanged ") == len(folders) and "stored" not in second
    suite = Suite.objects.get(team=None, slug=BUILTIN_SUITE_SLUG)
    assert [e.operator.slug for e in suite.entries.all()] == [f.spec.slug for f in folders]
    for folder in folders:
        version = OperatorVersion.objects.get(operator__slug=folder.spec.slug, operator__team=None)
        assert version.number == 1 and version.origin == "builtin"
        assert version.cases.count() == len(folder.spec.cases)
        assert all(c.outputs and not c.unsupported_targets for c in version.cases.all())
        assert version.starting_kernels.get(target="cpu-c").source == folder.naive_source


def kernel_of(slug: str, broken_from: str, broken_to: str) -> KernelToCheck:
    """The kernel broken as said, checked on every case but the big timing one: what breaks
    these kernels shows on the small cases, and the big one alone costs most of the time."""
    folder = next(f for f in read_builtin_suite() if f.spec.slug == slug)
    assert broken_from in folder.naive_source
    source = folder.naive_source.replace(broken_from, broken_to)
    spec = replace(folder.spec, cases=[c for c in folder.spec.cases if not c.timing])
    assert len(spec.cases) >= 5
    return KernelToCheck(spec, folder.reference_source, source)


def test_the_check_catches_wrong_kernels() -> None:
    """Ties resolved to the last index, a float32 scan, and a kernel that writes its input."""
    last_on_ties = kernel_of("argmax_rows", "xr[c] > xr[best]", "xr[c] >= xr[best]")
    exclusive_scan = kernel_of("cumsum", "sum += xr[c];\n            yr[c] = (float)sum;",
                               "yr[c] = (float)sum;\n            sum += xr[c];")  # fmt: skip
    writes_input = kernel_of(
        "vector_add", "out[i] = a[i] + b[i];", "out[i] = a[i] + b[i]; ((float *)a)[i] = 0;"
    )

    argmax, scan, vector_add = check_many([last_on_ties, exclusive_scan, writes_input])

    assert any(not c.passed for c in argmax) and any(c.passed for c in argmax)
    assert not any(c.passed for c in scan if c.case_id != "single")
    assert not any(c.passed for c in vector_add)
    assert all("the kernel wrote its inputs" in c.detail for c in vector_add)
