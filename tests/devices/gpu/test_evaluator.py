"""The triton target's full evaluation path on a host without a GPU: fresh seeds, a confined
candidate process running Triton's interpreter, the judge on files, runtime rules; no timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from apps.devices.evaluator import EvalSettings, OperatorUnderTest
from apps.devices.gpu.device import cuda_device
from apps.devices.gpu.evaluator import evaluate_triton
from apps.devices.gpu.suite import builtin_folder, folder_under_test

pytestmark = pytest.mark.skipif(cuda_device() is not None, reason="the interpreter path")

ADVERSARIAL = Path(__file__).resolve().parent / "adversarial"
OPTIONS = EvalSettings(seeds=1, warmup=1, repeats=3, timing=True, profile=True)


@pytest.fixture(scope="module")
def relu() -> OperatorUnderTest:
    return folder_under_test(builtin_folder("relu"))


def evaluate(operator: OperatorUnderTest, name: str) -> dict[str, Any]:
    return evaluate_triton(operator, (ADVERSARIAL / f"{name}.py").read_text(), OPTIONS)


def failed(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in verdict["correct"]["cases"] if not c["passed"]]


def test_a_starting_kernel_is_correct_on_the_small_cases_and_says_it_was_not_timed() -> None:
    folder = builtin_folder("gather_rows")

    verdict = evaluate_triton(folder_under_test(folder), folder.triton_source, OPTIONS)

    assert verdict["status"] == "correct", verdict["reason"]
    assert verdict["target"] == "triton" and verdict["flags"] == []
    correct = verdict["correct"]
    assert correct["runs"] == 2 * 4  # 4 small cases, each with a fresh seed and its repeat
    assert correct["skipped_cases"] == ["many_lookups", "pow2", "primes", "wide_tail"]
    assert not verdict["timed"]["ok"] and "no CUDA device" in verdict["timed"]["reason"]
    assert not verdict["profiled"]["ok"]
    assert "Triton interpreter" in verdict["environment"]["device"]


def test_torch_arithmetic_hidden_from_the_static_checks_is_caught_at_run_time(
    relu: OperatorUnderTest,
) -> None:
    verdict = evaluate(relu, "hidden_torch_math")

    assert verdict["status"] == "incorrect"
    assert len(failed(verdict)) == verdict["correct"]["runs"]
    assert all(
        "the launcher called PyTorch to compute (add)" in c["error"] for c in failed(verdict)
    )


def test_a_kernel_that_writes_its_input_or_returns_a_value_fails_every_run(
    relu: OperatorUnderTest,
) -> None:
    wrote = evaluate(relu, "writes_its_input")
    returned = evaluate(relu, "returns_its_output")

    assert wrote["status"] == returned["status"] == "incorrect"
    assert all("the kernel wrote its inputs" in c["error"] for c in failed(wrote))
    # Only the smallest cases can draw no negative input, so that relu in place leaves them
    # as they were: n = 1 half the time, n = 7 once in 128.
    negative_free = {c["case_id"] for c in wrote["correct"]["cases"] if c["passed"]}
    assert negative_free <= {"one", "seven"}
    assert len(failed(returned)) == returned["correct"]["runs"]
    assert all("the launcher returned a value" in c["error"] for c in failed(returned))


def test_a_rounded_down_grid_leaves_nan_in_the_tail(relu: OperatorUnderTest) -> None:
    verdict = evaluate(relu, "misses_the_tail")

    assert verdict["status"] == "incorrect"
    by_case = {c["case_id"]: c for c in verdict["correct"]["cases"]}
    assert by_case["pow2_4096"]["passed"] and by_case["odd_1023"]["passed"]  # no partial block
    assert "NaN where the reference has numbers" in by_case["prime_65521"]["error"]


def test_a_statically_refused_kernel_never_runs(relu: OperatorUnderTest) -> None:
    verdict = evaluate(relu, "side_stream")

    assert verdict["status"] == "rejected" and verdict["correct"] is None
    assert "line 18" in verdict["reason"]


def test_a_module_python_cannot_parse_is_a_compile_error(relu: OperatorUnderTest) -> None:
    verdict = evaluate_triton(relu, "def kope_kernel(inputs, outputs, attrs)\n    pass\n", OPTIONS)

    assert verdict["status"] == "compile_error"
    (error,) = verdict["compiled"]["errors"]
    assert (error["file"], error["line"]) == ("candidate.py", 1)
    assert error["source_line"] == "def kope_kernel(inputs, outputs, attrs)"
