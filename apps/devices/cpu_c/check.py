"""A plain compile-and-compare check of a cpu-c kernel against an operator's reference.

The kernel is compiled with gcc and called, through the tensor struct of kope_kernel.h, in the
same child process that computes the reference (apps/operators/refrun.py). This is the check
the built-in suite's starting kernels must pass; the full, hack-resistant evaluator adds fresh
seeds, NaN-filled outputs, a separate sandboxed kernel process, timing and profiling on top.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apps.devices.cpu_c.build import build_shared_object
from apps.operators.sandbox import run_reference, run_reference_batch
from apps.operators.spec import OperatorSpec


@dataclass(frozen=True)
class CaseCheck:
    case_id: str
    passed: bool
    detail: str


def kope_request(spec: OperatorSpec, reference_source: str, *, seed: int) -> dict[str, Any]:
    return {
        "kind": "kope",
        "source": {"reference": reference_source},
        "cases": [{"case_id": c.case_id, "params": c.params, "dtype": c.dtype} for c in spec.cases],
        "attributes": [spec.attribute_values(c.params) for c in spec.cases],
        "seed": seed,
        "max_abs": spec.max_abs,
        "max_rel": spec.max_rel,
    }


def check_kernel(
    spec: OperatorSpec, reference_source: str, kernel_source: str, *, seed: int = 1
) -> list[CaseCheck]:
    request = kope_request(spec, reference_source, seed=seed)
    request["kernel_so"] = str(build_shared_object(kernel_source))
    answer = run_reference(request)
    return [_case_check(case) for case in answer["cases"]]


@dataclass(frozen=True)
class KernelToCheck:
    spec: OperatorSpec
    reference_source: str
    kernel_source: str


def check_many(kernels: list[KernelToCheck], *, seed: int = 1) -> list[list[CaseCheck]]:
    """check_kernel for several operators in one child (PyTorch starts once).

    Every kernel is compiled first; a CompileError stops the whole check.
    """
    requests = []
    for item in kernels:
        request = kope_request(item.spec, item.reference_source, seed=seed)
        request["kernel_so"] = str(build_shared_object(item.kernel_source))
        requests.append(request)
    answers = run_reference_batch(requests)
    return [_answer_checks(answer) for answer in answers]


def _answer_checks(answer: dict[str, Any]) -> list[CaseCheck]:
    if "error" in answer:
        return [CaseCheck("*", False, answer["error"])]
    return [_case_check(case) for case in answer["cases"]]


def _case_check(case: dict[str, Any]) -> CaseCheck:
    if case.get("error"):
        return CaseCheck(case["case_id"], False, case["error"])
    check = case["check"]
    detail = f"max_abs={check['max_abs']:.3g} max_rel={check['max_rel']:.3g}"
    if not check["inputs_intact"]:
        detail += " (the kernel wrote its inputs)"
    return CaseCheck(case["case_id"], bool(check["passed"]), detail)
