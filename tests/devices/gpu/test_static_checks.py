"""Static checks of triton candidates: each adversarial kernel is refused, with its line, for
the hack it tries; the built-in starting kernels and lower precision on half-precision
operators are accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.devices.gpu.static_checks import triton_problems
from apps.devices.gpu.suite import LEVEL_ONE, builtin_folder

ADVERSARIAL = Path(__file__).resolve().parent / "adversarial"
FLOAT32 = {"float32"}


def problems_of(name: str, dtypes: set[str] = FLOAT32) -> str:
    return "\n".join(triton_problems((ADVERSARIAL / f"{name}.py").read_text(), dtypes=dtypes))


@pytest.mark.parametrize(
    ("name", "evidence"),
    [
        ("calls_torch_functional", "line 18: torch.nn: PyTorch computing"),
        ("tensor_math_in_launcher", "line 17: .copy_() in the launcher"),
        ("arithmetic_on_inputs", "line 18: the launcher does tensor arithmetic in Python"),
        ("side_stream", "line 18: .Stream: streams, events, graphs"),
        ("background_thread", "line 3: import of threading"),
        ("aliased_output", "line 17: assignment to .data"),
        ("python_writes_output", "line 17: the launcher writes a tensor from Python"),
        ("precision_downgrade", "line 11: float16: the operator's tensors are float32"),
        ("escapes_the_sandbox", "line 17: __import__ is not available"),
        ("keeps_global_state", "line 19: global: a launcher keeps no state"),
    ],
)
def test_it_rejects_the_adversarial_kernel_for_its_hack(name: str, evidence: str) -> None:
    assert evidence in problems_of(name)


def test_it_rejects_dunder_access_and_a_side_stream_on_every_line_that_tries() -> None:
    escapes = problems_of("escapes_the_sandbox")
    assert ".__class__: dunder attributes" in escapes and "system() in the launcher" in escapes
    assert "line 19: .stream:" in problems_of("side_stream")


@pytest.mark.parametrize("slug", LEVEL_ONE)
def test_the_starting_kernels_pass_the_static_checks(slug: str) -> None:
    folder = builtin_folder(slug)
    dtypes = {t.dtype for t in folder.spec.inputs + folder.spec.outputs}
    assert triton_problems(folder.triton_source, dtypes=dtypes) == []


def test_half_precision_is_no_downgrade_on_a_half_precision_operator() -> None:
    assert problems_of("precision_downgrade", {"float16"}) == ""


def test_tl_dot_on_float32_needs_ieee_precision() -> None:
    source = (
        (ADVERSARIAL / "precision_downgrade.py")
        .read_text()
        .replace(".to(tl.float16)", "")
        .replace("tl.maximum(x, 0.0)", "tl.dot(x, x)")
    )
    assert 'needs input_precision="ieee"' in "\n".join(triton_problems(source, dtypes=FLOAT32))
    ieee = source.replace("tl.dot(x, x)", 'tl.dot(x, x, input_precision="ieee")')
    assert triton_problems(ieee, dtypes=FLOAT32) == []


def test_a_module_without_the_launcher_or_with_the_wrong_signature_is_refused() -> None:
    assert triton_problems("import triton\n", dtypes=FLOAT32) == [
        "the module defines no kope_kernel(inputs, outputs, attrs)"
    ]
    wrong = "def kope_kernel(inputs, outputs):\n    return None\n"
    assert triton_problems(wrong, dtypes=FLOAT32) == [
        "line 1: kope_kernel takes exactly (inputs, outputs, attrs)"
    ]


def test_module_level_code_other_than_imports_functions_and_constants_is_refused() -> None:
    source = (
        "import torch\ntorch.manual_seed(0)\n\ndef kope_kernel(inputs, outputs, attrs):\n    pass\n"
    )
    assert "line 2: only imports, functions and constants at module level, not Expr" in (
        triton_problems(source, dtypes=FLOAT32)
    )
