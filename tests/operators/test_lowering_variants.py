"""One starting kernel for cases that one trace cannot cover: other ranks, dtypes, sizes of
1, scalar values and sizes the model fixes each get a trace of their own, and the kernel
calls the one that fits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from apps.operators.lowering import LoweringError, lower_variants
from apps.operators.refrun import Reference, examples_to_trace, lowered
from tests.operators.lowering_support import assert_matches, compile_kernel, run_lowered


class ScaledNeg(torch.nn.Module):
    def forward(self, x: torch.Tensor, factor: float) -> torch.Tensor:
        return -x * factor


CALLS: list[list[Any]] = [
    [torch.randn(1), 2.0],  # a size of 1: torch.export fixes it
    [torch.randn(5, 3), 2.0],
    [torch.randn(2, 3, 4, 5), 2.0],
    [torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4), 2.0],
    [torch.randn(7, 3), 0.5],  # another scalar value
]


def test_calls_of_every_rank_dtype_size_and_scalar_run_on_one_kernel(tmp_path: Path) -> None:
    model = ScaledNeg()
    source, left_out = lower_variants([(model, call) for call in CALLS])
    kernel = compile_kernel(source, tmp_path)

    assert not left_out
    for call in CALLS:
        actual, expected = run_lowered(kernel, model, call)
        assert_matches(actual, expected, rtol=1e-6, atol=1e-6)
    bigger = [torch.randn(11, 9), 2.0]  # a size no example had: the 2-D trace covers it
    assert_matches(*run_lowered(kernel, model, bigger), rtol=1e-6, atol=1e-6)


def test_a_call_no_trace_fits_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    model = ScaledNeg()
    source, _ = lower_variants([(model, CALLS[1])])
    kernel = compile_kernel(source, tmp_path)

    with pytest.raises(RuntimeError, match="returned 3"):
        run_lowered(kernel, model, [torch.randn(5, 3), 4.0])


def test_an_example_that_will_not_lower_is_left_out_saying_why(tmp_path: Path) -> None:
    model = ScaledNeg()
    halves = [torch.randn(4, 4).half(), 2.0]

    source, left_out = lower_variants([(model, CALLS[1]), (model, halves)])

    assert left_out == ["dtype torch.float16: not lowered (the kernel ABI has no such type)"]
    assert_matches(*run_lowered(compile_kernel(source, tmp_path), model, CALLS[1]), 1e-6, 1e-6)
    with pytest.raises(LoweringError, match="float16"):
        lower_variants([(model, halves)])


def reference_of(calls: dict[str, list[Any]]) -> Reference:
    return Reference(
        make_inputs=lambda params, generator: calls[params["shape"]],
        compute=lambda inputs, params: [],
        model=lambda params: ScaledNeg(),
    )


def test_the_first_case_of_each_kind_of_call_comes_first() -> None:
    calls = {"4x4": [torch.randn(4, 4), 2.0], "8x8": [torch.randn(8, 8), 2.0],
             "1x8": [torch.randn(1, 8), 2.0], "8x8 int": [torch.ones(8, 8, dtype=torch.int32), 2.0],
             "8x8 x3": [torch.randn(8, 8), 3.0]}  # fmt: skip
    cases = [{"case_id": i, "params": {"shape": shape}} for i, shape in enumerate(calls)]

    examples = examples_to_trace(reference_of(calls), cases)

    assert [case["case_id"] for case, _ in examples] == [0, 2, 3, 4, 1]


def test_a_case_the_first_trace_covers_is_not_traced_again(tmp_path: Path) -> None:
    built: list[str] = []

    def model(shape: str) -> torch.nn.Module:
        built.append(shape)
        return ScaledNeg()

    examples = [(lambda s=s: model(s), call) for s, call in
                [("5x3", CALLS[1]), ("9x4", [torch.randn(9, 4), 2.0])]]  # fmt: skip
    _, left_out = lower_variants(examples)

    assert built == ["5x3"] and not left_out


class Normalized(torch.nn.Module):
    """LayerNorm over the last dims, which its settings fix: torch.export makes them constants."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def test_cases_whose_model_fixes_other_sizes_each_get_a_trace(tmp_path: Path) -> None:
    shapes = [(6, 5), (3, 7)]  # one kind of call (float, rank 3), two fixed trailing sizes
    models = {shape: Normalized(shape) for shape in shapes}
    calls = {shape: [torch.randn(2, *shape)] for shape in shapes}
    reference = Reference(make_inputs=lambda params, generator: calls[params["shape"]],
                          compute=lambda inputs, params: [],
                          model=lambda params: models[params["shape"]])  # fmt: skip
    cases = [{"case_id": str(shape), "params": {"shape": shape}} for shape in shapes]

    answer = lowered(reference, cases)
    kernel = compile_kernel(answer["source"], tmp_path)

    assert answer["left_out"] == []
    for shape in shapes:
        assert_matches(*run_lowered(kernel, models[shape], calls[shape]), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="returned 2"):
        run_lowered(kernel, Normalized((4, 4)), [torch.randn(2, 4, 4)])


class SumOver(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(self.dim)


def test_calls_of_one_input_shape_whose_outputs_differ_each_get_a_trace(tmp_path: Path) -> None:
    """What the model is built with can make another output from the same inputs (a row's
    setting the kernel is not given): where the outputs' shapes are known, a trace that makes
    other shapes does not take the call."""
    x = torch.randn(4, 6)
    models = {0: SumOver(0), 1: SumOver(1)}
    examples = [(models[d], [x], [], [list(models[d](x).shape)]) for d in models]

    source, left_out = lower_variants(examples)
    kernel = compile_kernel(source, tmp_path)

    assert not left_out and source.count("static int kope_variant_") == 2
    for model in models.values():
        assert_matches(*run_lowered(kernel, model, [x]), rtol=1e-5, atol=1e-5)
