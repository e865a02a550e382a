"""A plain check of Triton starting kernels against their operators' references.

The triton counterpart of apps/devices/cpu_c/check.py: every kernel and its reference run in
one confined child (Triton and PyTorch start once), on the CUDA device when there is one and
in Triton's interpreter otherwise (small cases only). This is the check the built-in suite's
Triton kernels must pass; the evaluator (evaluator.py) adds fresh seeds, a separate process
for the candidate, the input tamper check on files, timing and profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apps.devices.cpu_c.check import CaseCheck
from apps.devices.evaluator import EvalSettings, EvaluationError, Workspace
from apps.devices.gpu import evaluator as gpu
from apps.devices.gpu.device import cuda_device
from apps.operators.spec import OperatorSpec


@dataclass(frozen=True)
class TritonKernelToCheck:
    spec: OperatorSpec
    reference_source: str
    kernel_source: str


def check_triton_many(kernels: list[TritonKernelToCheck], *, seed: int = 1
                      ) -> list[list[CaseCheck]]:  # fmt: skip
    """Per kernel, per case: passed or not, and why; a case too big for the interpreter is
    left out of the list."""
    device = cuda_device()
    options = EvalSettings.from_settings()
    with Workspace() as workspace:
        operators = [operator_item(workspace, i, k) for i, k in enumerate(kernels)]
        manifest = {"mode": "check", "kind": "triton", "device": "cuda" if device else "cpu",
                    "candidate": "", "seed": seed, "operators": operators,
                    "max_elements": gpu.INTERPRETER_MAX_ELEMENTS}  # fmt: skip
        outcome, result = gpu.run_harness(workspace, manifest, options, device)
    if outcome.failure or not isinstance(result.get("operators"), list):
        raise EvaluationError(f"the check failed: {outcome.failure or 'no result'}")
    return [answer_checks(answer) for answer in result["operators"]]


def operator_item(workspace: Workspace, index: int, kernel: TritonKernelToCheck) -> dict[str, Any]:
    path = workspace.sandbox / f"kernel{index}.py"
    path.write_text(kernel.kernel_source)
    path.chmod(0o644)
    spec = kernel.spec
    cases = [{"case_id": c.case_id, "params": c.params, "attrs": spec.attribute_values(c.params)}
             for c in spec.cases if not c.timing]  # fmt: skip
    return {"candidate": path.name, "reference": {"kind": "kope",
            "source": {"reference": kernel.reference_source}}, "cases": cases,
            "max_abs": spec.max_abs, "max_rel": spec.max_rel}  # fmt: skip


def answer_checks(answer: dict[str, Any]) -> list[CaseCheck]:
    if "error" in answer:
        return [CaseCheck("*", False, str(answer["error"]))]
    return [case_check(case) for case in answer["cases"] if not case.get("skipped")]


def case_check(case: dict[str, Any]) -> CaseCheck:
    if "error" in case:
        return CaseCheck(case["case_id"], False, str(case["error"]))
    check = case["check"]
    detail = f"max_abs={check['max_abs']:.3g} max_rel={check['max_rel']:.3g}"
    if not check["inputs_intact"]:
        detail += " (the kernel wrote its inputs)"
    return CaseCheck(case["case_id"], bool(check["passed"]), detail)
