"""Built-in operators as the GPU pipeline takes them, straight from their folders (no database).

The check script and the tests use these: the verdicts are the ones a device worker would
give for the stored operator, whose cases come from the same operator.toml.
"""

from __future__ import annotations

from apps.devices.evaluator import OperatorUnderTest
from apps.operators.builtin_suite import OperatorFolder, read_builtin_suite
from apps.operators.targets import unsupported_targets

LEVEL_ONE = (
    "argmax_rows", "axpby", "cumsum", "gather_rows", "gelu", "mse_loss", "relu", "row_sum",
    "sigmoid", "transpose_2d", "vector_add",
)  # fmt: skip


def builtin_folder(slug: str) -> OperatorFolder:
    for folder in read_builtin_suite():
        if folder.spec.slug == slug:
            return folder
    raise KeyError(f"no built-in operator {slug!r}")


def folder_under_test(folder: OperatorFolder) -> OperatorUnderTest:
    spec = folder.spec
    cases = []
    for case in spec.cases:
        dtypes = {t.resolved_dtype(case.dtype) for t in spec.inputs + spec.outputs}
        cases.append(
            {
                "case_id": case.case_id,
                "params": case.params,
                "dtype": case.dtype,
                "timing": case.timing,
                "unsupported_targets": unsupported_targets(dtypes),
            }
        )
    return OperatorUnderTest(label=f"{spec.slug} (built-in)", spec=spec, reference_kind="kope",
                             reference_source={"reference": folder.reference_source},
                             cases=cases)  # fmt: skip
