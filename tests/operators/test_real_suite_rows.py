"""NPUKernelBench rows as the suite's own runner hands them over, and the rows a target cannot
hold. Real imports: every reference runs in the sandboxed child, and the checks compile and
call real cpu-c kernels there.

The suite's runner reads test_cases.csv with pandas and passes each row (a Series) to
get_inputs, get_init_inputs and custom_check_precision, which do `eval(param.get('shape'))`,
`getattr(torch, param.get('dtype'))` and `from framework.utils import check_precision`.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from apps.accounts.models import Team
from apps.devices.cpu_c.build import build_shared_object
from apps.operators.definitions import OperatorDefinition
from apps.operators.importers import npukernelbench
from apps.operators.importers.common import ProblemError
from apps.operators.models import Operator, OperatorVersion
from apps.operators.reference_loading import check_passed, check_precision, suite_row
from apps.operators.sandbox import run_reference
from apps.operators.services import TIMING_CASE_BYTES, KeptCases, definition_of, with_timing_case
from apps.operators.spec import CaseSpec, OperatorSpec, spec_from_json
from tests.operators.conftest import SAMPLES
from tests.operators.test_importers import outcomes, run_import

pytestmark = pytest.mark.usefixtures("short_reference_limits")

NPU = SAMPLES / "npukernelbench"
RELU_NAIVE = (
    Path(__file__).resolve().parents[2] / "apps/operators/builtin/relu/naive.c"
).read_text()

TYPED_CSV = """case_id;shape;dtype;n;alpha;flag;note;label;maybe
1;[4, 8];float32;3;2.5;True;;x1;True
2;[5];float32;2;1;False;;7;
"""
# Raises, naming what it got, unless the row is typed as pandas types it.
TYPED_PREPARE = '''
import math
import torch


def get_inputs(param, device=None):
    """
    Generate input tensors for the model based on parameters from DataFrame row.
    """
    types = {k: type(v).__name__ for k, v in param.items()}
    wanted = {"case_id": "int", "shape": "str", "dtype": "str", "n": "int", "alpha": "float",
              "flag": "bool", "note": "float", "label": "str", "maybe": types["maybe"]}
    if types != wanted or not math.isnan(param.get("note")) or param.alpha != param["alpha"]:
        raise TypeError(f"the row is {dict(param)}")
    if param["case_id"] == 2 and not (math.isnan(param["maybe"]) and param["label"] == "7"):
        raise TypeError(f"the row is {dict(param)}")
    shape = eval(param.get("shape", "[1]"))
    dtype = getattr(torch, param.get("dtype", "float16"))
    return [torch.full(shape, float(param.get("alpha", 2.0)), dtype=dtype) * param["n"]]


def get_init_inputs(param, device=None):
    return [param["flag"]]
'''
TYPED_MODULE = """
import torch
import torch_npu


class Model(torch.nn.Module):
    def __init__(self, negate):
        super().__init__()
        self.negate = negate

    def forward(self, x):
        return -x if self.negate else x
"""


def npu_operator(root: Path, name: str, *, csv: str, prepare: str, module: str) -> Path:
    validation = root / "level1" / "math" / name / "validation"
    validation.mkdir(parents=True)
    (validation / "test_cases.csv").write_text(csv)
    (validation / "prepare_inputs.py").write_text(prepare)
    (validation / "module.py").write_text(module)
    return root


def kernel_checks(version: OperatorVersion, kernel_source: str) -> dict[str, Any]:
    """Each case's verdict on a compiled kernel, as the cpu-c check computes it (the case's
    error text where the run failed)."""
    spec = spec_from_json(version.spec)
    request = {
        **definition_of(version).runner_request(seed=3),
        "kernel_so": str(build_shared_object(kernel_source)),
        "attributes": [spec.attribute_values(c.params) for c in spec.cases],
        "max_abs": spec.max_abs,
        "max_rel": spec.max_rel,
    }
    answer = run_reference(request)
    return {c["case_id"]: c["check"]["passed"] if "check" in c else c["error"]
            for c in answer["cases"]}  # fmt: skip


# --- 1. the row as pandas gives it --------------------------------------------------------


def test_a_row_is_typed_column_by_column_as_pandas_types_it() -> None:
    cases = npukernelbench.parse_test_cases(TYPED_CSV, where="t.csv")

    assert [c.params for c in cases] == [
        {"case_id": 1, "shape": "[4, 8]", "dtype": "float32", "n": 3, "alpha": 2.5,
         "flag": True, "note": None, "label": "x1", "maybe": True},
        {"case_id": 2, "shape": "[5]", "dtype": "float32", "n": 2, "alpha": 1.0,
         "flag": False, "note": None, "label": "7", "maybe": None},
    ]  # fmt: skip
    # What the runner hands over: NaN for an empty cell, attribute access as on a Series.
    row = suite_row(cases[1].params)
    assert math.isnan(row["note"]) and math.isnan(row.get("maybe")) and row.alpha == 1.0
    with pytest.raises(AttributeError):
        _ = row.missing


def test_a_number_column_of_whole_values_is_ints_as_the_runners_preprocessing_makes_it() -> None:
    """framework.utils.preprocess_dataframe turns a number column with no empty cell whose
    values are all whole into ints; one with an empty cell, or a fraction, stays floats."""
    csv = "case_id;scale;eps;gap\n1;1.0;0.5;2.0\n2;2;1.0;\n"

    cases = npukernelbench.parse_test_cases(csv, where="t.csv")

    assert [(c.params["scale"], c.params["eps"], c.params["gap"]) for c in cases] == [
        (1, 0.5, 2.0), (2, 1.0, None)]  # fmt: skip
    assert all(type(c.params["scale"]) is int for c in cases)


def test_a_cell_pandas_reads_as_infinite_fails_its_operator_naming_line_and_column() -> None:
    with pytest.raises(ProblemError, match=r"^t.csv line 3, column a: '-inf' is not a finite"):
        npukernelbench.parse_test_cases("case_id;a\n1;2.5\n2;-inf\n", where="t.csv")


def test_the_reference_gets_the_row_as_the_suites_runner_gives_it(
    team: Team, tmp_path: Path
) -> None:
    root = npu_operator(tmp_path, "Typed", csv=TYPED_CSV, prepare=TYPED_PREPARE,
                        module=TYPED_MODULE)  # fmt: skip

    run = run_import(root, team)

    assert outcomes(run) == {"level1/math/Typed": ("imported", "")}
    version = OperatorVersion.objects.get(operator__slug="npu_l1_typed")
    assert [c.outputs for c in version.cases.all()] == [
        [{"shape": [4, 8], "dtype": "float32"}], [{"shape": [5], "dtype": "float32"}]]  # fmt: skip


def test_the_samples_use_the_suites_own_idiom() -> None:
    prepares = [p.read_text() for p in NPU.rglob("validation/prepare_inputs.py")]
    assert all("eval(param.get('shape', '[1]'))" in text for text in prepares if "'shape'" in text)
    assert any("from framework.utils import check_precision" in text for text in prepares)


def test_a_custom_check_with_the_suites_check_precision_judges_a_kernel(team: Team) -> None:
    run_import(NPU / "level1" / "math", team)
    version = OperatorVersion.objects.get(operator__slug="npu_l1_complex_norm")
    kernel = """#include <math.h>
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    float *y = (float *)outputs[0].data;
    int64_t rows = inputs[0].shape[0], cols = inputs[0].shape[1];
    for (int64_t r = 0; r < rows; ++r) {
        float sum = 0.0f;
        for (int64_t c = 0; c < cols; ++c) sum += fabsf(x[r * cols + c]);
        y[r] = sum + OFFSET;
    }
    return 0;
}
"""

    assert kernel_checks(version, kernel.replace("OFFSET", "0.0f")) == {"1": True, "3": True}
    # The suite's check_precision answers (passed, abs differences, relative differences):
    # a tuple, true as a whole even when it says failed.
    assert kernel_checks(version, kernel.replace("OFFSET", "0.05f")) == {"1": False, "3": False}


def test_check_precision_is_the_suites_rule() -> None:
    import torch

    expected = [torch.tensor([1.0, 100.0])]
    # Within max_abs_error, or within max_rel_error of |expected|, element by element:
    assert check_precision(expected, [torch.tensor([1.05, 100.0])], max_abs_error=0.1,
                           max_rel_error=1e-6)[0] == 1  # fmt: skip
    assert check_precision(expected, [torch.tensor([1.0, 100.5])], max_abs_error=0.1,
                           max_rel_error=0.01)[0] == 1  # fmt: skip
    assert check_precision(expected, [torch.tensor([1.0, 102.0])], max_abs_error=0.1,
                           max_rel_error=0.01)[0] == 0  # fmt: skip
    # Unlike the suite's: another shape, or NaN for a number, fails.
    assert check_precision(expected, [torch.tensor([[1.0, 100.0]])], 0.1, 0.1)[0] == 0
    assert check_precision(expected, [torch.tensor([1.0, math.nan])], 0.1, 0.1)[0] == 0
    assert check_passed(check_precision(expected, expected, 0.1, 0.1)) is True
    assert check_passed((0, torch.zeros(1), torch.zeros(1))) is False


# --- 2. rows no target can hold, rows the reference fails on ----------------------------


def test_a_row_naming_a_complex_dtype_is_left_out_saying_why(team: Team) -> None:
    run = run_import(NPU / "level1" / "math", team)

    assert outcomes(run)["Abs"] == (
        "imported",
        "left out case 3: complex64 cannot be represented on cpu-c, triton, cuda",
    )
    version = OperatorVersion.objects.get(operator__slug="npu_l1_abs")
    assert [c.case_id for c in version.cases.all()] == ["1", "2"]


def test_a_row_whose_reference_makes_a_complex_tensor_is_left_out_saying_why(
    team: Team,
) -> None:
    run = run_import(NPU / "level1" / "math", team)

    assert outcomes(run)["ComplexNorm"] == (
        "imported",
        "left out case 2: complex64 cannot be represented on cpu-c, triton, cuda",
    )
    version = OperatorVersion.objects.get(operator__slug="npu_l1_complex_norm")
    assert [c.case_id for c in version.cases.all()] == ["1", "3"]


def test_an_operator_with_no_row_a_target_can_hold_fails_naming_each(
    team: Team, tmp_path: Path
) -> None:
    shutil.copytree(NPU / "level1" / "math" / "Abs", tmp_path / "level1" / "Abs")
    csv = tmp_path / "level1" / "Abs" / "validation" / "test_cases.csv"
    csv.write_text("case_id;shape;dtype\n1;[4];complex64\n2;[3];complex128\n")

    run = run_import(tmp_path, team)

    assert outcomes(run) == {"level1/Abs": (
        "failed", "level1/Abs/validation/test_cases.csv: no row any target can represent "
        "(case 1: complex64 cannot be represented on cpu-c, triton, cuda; case 2: complex128 "
        "cannot be represented on cpu-c, triton, cuda)")}  # fmt: skip
    assert not Operator.objects.filter(team=team).exists()


def test_an_operator_whose_reference_fails_on_every_row_fails_naming_each(
    team: Team, tmp_path: Path
) -> None:
    shutil.copytree(NPU / "level1" / "broken" / "RaisesOnCase", tmp_path / "level1" / "Raises")
    csv = tmp_path / "level1" / "Raises" / "validation" / "test_cases.csv"
    csv.write_text("case_id;shape;dtype\n1;[4];float32\n2;[3];float32\n")

    run = run_import(tmp_path, team)

    failure = "RuntimeError: 1-D inputs are not handled (validation/module.py line 8)"
    assert outcomes(run) == {
        "level1/Raises": ("failed", f"case 1: {failure}; case 2: {failure}")}  # fmt: skip
    assert not Operator.objects.filter(team=team).exists()


# --- 3. float16 and bfloat16 rows on cpu-c ------------------------------------------------


def test_float16_and_bfloat16_rows_run_as_float32_and_a_cpu_kernel_passes_them(
    team: Team,
) -> None:
    run_import(NPU / "level1" / "activation", team)
    relu = OperatorVersion.objects.get(operator__slug="npu_l1_relu")
    cases = {c.case_id: c for c in relu.cases.all()}

    assert cases["5"].params["run_as"] == "float32 (row says bfloat16)"
    assert (cases["5"].dtype, cases["5"].unsupported_targets) == ("float32", [])
    assert cases["5"].inputs == cases["5"].outputs == [{"shape": [1024], "dtype": "float32"}]
    assert kernel_checks(relu, RELU_NAIVE) == dict.fromkeys(["1", "2", "3", "4", "5"], True)


def test_a_float16_row_with_scalars_and_its_own_tolerance_runs_as_float32(team: Team) -> None:
    run = run_import(NPU / "level1" / "math", team)

    assert outcomes(run)["MulSigmoid"] == (
        "imported",
        "case 1 runs as float32 (row says float16); case 2 runs as float32 (row says bfloat16)",
    )
    version = OperatorVersion.objects.get(operator__slug="npu_l1_mul_sigmoid")
    first = version.cases.get(case_id="1")
    assert first.params["run_as"] == "float32 (row says float16)"
    assert [i.get("dtype", i.get("scalar")) for i in first.inputs] == [
        "float32", "float32", "float", "float", "float"]  # fmt: skip
    assert version.spec["attributes"] == [
        {"name": "a2", "type": "float", "default": 0.3},
        {"name": "a3", "type": "float", "default": 0.1},
        {"name": "a4", "type": "float", "default": 0.8},
    ]


def test_a_row_whose_reference_fixes_float16_runs_as_float32_saying_so(
    team: Team, tmp_path: Path
) -> None:
    prepare = """
import torch


def get_inputs(param, device=None):
    shape = eval(param.get('shape', '[1]'))
    return [torch.rand(shape, device=device, dtype=torch.float16) * 0.02 - 0.01]
"""
    module = (NPU / "level1" / "activation" / "Relu" / "validation" / "module.py").read_text()
    root = npu_operator(tmp_path, "HalfRelu", csv="case_id;shape\n1;[4, 8]\n2;[3]\n",
                        prepare=prepare, module=module)  # fmt: skip

    run = run_import(root, team)

    assert outcomes(run) == {"level1/math/HalfRelu": (
        "imported", "case 1 runs as float32 (the reference makes float16); case 2 runs as "
        "float32 (the reference makes float16)")}  # fmt: skip
    version = OperatorVersion.objects.get(operator__slug="npu_l1_half_relu")
    assert [(c.dtype, c.inputs, c.unsupported_targets) for c in version.cases.all()] == [
        ("float32", [{"shape": [4, 8], "dtype": "float32"}], []),
        ("float32", [{"shape": [3], "dtype": "float32"}], []),
    ]
    assert kernel_checks(version, RELU_NAIVE) == {"1": True, "2": True}


# --- lists of tensors in and out (the Foreach operators), rows of another kind --------------

FOREACH_CSV = "case_id;input_shape;dtype\n0;[[4, 3], [5]];float32\n1;[[6, 5], [9]];float32\n"
FOREACH_PREPARE = """
import torch


def get_inputs(param, device=None):
    shapes = eval(param.get("input_shape", "[[1]]"))
    dtype = getattr(torch, param.get("dtype", "float16"))
    x1 = [torch.randn(shape, device=device, dtype=dtype) for shape in shapes]
    x2 = [torch.randn(shape, device=device, dtype=dtype) for shape in shapes]
    return x1, x2, "add"
"""
FOREACH_MODULE = """
import torch
import torch_npu


class Model(torch.nn.Module):
    def forward(self, x1, x2, how):
        assert how == "add"
        return [a + b for a, b in zip(x1, x2)]
"""
# Two lists of two tensors in, one list of two out: a kernel sees four inputs and two outputs.
FOREACH_KERNEL = """#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    if (n_inputs != 4 || n_outputs != 2) return 1;
    for (int k = 0; k < 2; ++k) {
        const float *a = (const float *)inputs[k].data, *b = (const float *)inputs[k + 2].data;
        float *y = (float *)outputs[k].data;
        for (int64_t i = 0; i < kope_numel(&outputs[k]); ++i) y[i] = a[i] + b[i];
    }
    return 0;
}
"""


def test_lists_of_tensors_reach_a_kernel_flat_and_the_reference_as_it_made_them(
    team: Team, tmp_path: Path
) -> None:
    root = npu_operator(tmp_path, "ForeachAdd", csv=FOREACH_CSV, prepare=FOREACH_PREPARE,
                        module=FOREACH_MODULE)  # fmt: skip

    run = run_import(root, team)

    assert outcomes(run)["level1/math/ForeachAdd"] == ("imported", "")
    version = OperatorVersion.objects.get(operator__slug="npu_l1_foreach_add")
    assert [t["name"] for t in version.spec["inputs"]] == ["x0", "x1", "x2", "x3"]
    assert [t["name"] for t in version.spec["outputs"]] == ["y0", "y1"]
    assert kernel_checks(version, FOREACH_KERNEL) == {"0": True, "1": True}
    assert kernel_checks(version, FOREACH_KERNEL.replace("a[i] + b[i]", "a[i] - b[i]")) == {
        "0": False, "1": False}  # fmt: skip
    lowered = version.starting_kernels.get(target="cpu-c").source
    assert kernel_checks(version, lowered) == {"0": True, "1": True}


FILL_CSV = "case_id;value_kind\n0;tensor\n1;number\n2;tensor\n"
FILL_PREPARE = """
import torch


def get_inputs(param, device=None):
    value = torch.tensor(2.0) if param["value_kind"] == "tensor" else 2.0
    return torch.zeros(3, 4), value
"""
FILL_MODULE = """
import torch


class Model(torch.nn.Module):
    def forward(self, x, value):
        return torch.full_like(x, float(value))
"""


def test_a_row_whose_input_is_a_number_where_the_first_rows_is_a_tensor_is_left_out(
    team: Team, tmp_path: Path
) -> None:
    root = npu_operator(tmp_path, "Fill", csv=FILL_CSV, prepare=FILL_PREPARE, module=FILL_MODULE)

    run = run_import(root, team)

    outcome, note = outcomes(run)["level1/math/Fill"]
    assert outcome == "imported"
    assert note.startswith("left out case 1: its input 1 is a number, where case 0's is a tensor")
    version = OperatorVersion.objects.get(operator__slug="npu_l1_fill")
    assert [c.case_id for c in version.cases.all()] == ["0", "2"]


SPENCE_CSV = "case_id;shape;dtype\n0;[8];float32\n"
SPENCE_PREPARE = """
import torch


def get_inputs(param, device=None):
    return [torch.rand(eval(param.get("shape", "[1]"))) + 0.5]
"""
SPENCE_MODULE = """
import torch
import torch_npu
from scipy.special import spence


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.from_numpy(spence(x.numpy()))
"""


def test_a_package_the_problem_imports_still_sees_its_optional_modules_missing(
    team: Team, tmp_path: Path
) -> None:
    """scipy probes `import cython` and must get the ImportError; only the problem's own
    imports (torch_npu) become stand-ins."""
    root = npu_operator(tmp_path, "Spence", csv=SPENCE_CSV, prepare=SPENCE_PREPARE,
                        module=SPENCE_MODULE)  # fmt: skip

    run = run_import(root, team)

    outcome, note = outcomes(run)["level1/math/Spence"]
    assert outcome == "imported", note


def kept_rows(sizes: dict[str, int], dtype: str = "float32") -> KeptCases:
    """Cases of one float32 input of `sizes[case]` elements and an output like it."""
    cases = [CaseSpec(case_id=case, params={}, dtype="") for case in sizes]
    spec = OperatorSpec(slug="rows", name="rows", family="x", level=1, description="",
                        inputs=[], outputs=[], cases=cases)  # fmt: skip
    tensor = {case: {"shape": [n], "dtype": dtype} for case, n in sizes.items()}
    definition = OperatorDefinition(spec=spec, reference_kind="npukernelbench",
                                    reference_source={}, origin="npukernelbench")  # fmt: skip
    outcomes = [{"inputs": [tensor[c]], "outputs": [tensor[c]]} for c in sizes]
    return KeptCases(definition, outcomes, [])


def test_rows_that_name_no_timing_case_time_the_largest_within_the_limit() -> None:
    within = TIMING_CASE_BYTES // 8  # input and output of float32: exactly the limit
    spec = with_timing_case(kept_rows({"a": 10, "huge": within + 1, "b": within})).definition.spec

    assert [c.case_id for c in spec.cases if c.timing] == ["b"]
    assert (
        "Timed on case b (256.0 MiB of inputs and outputs, the largest within" in spec.description
    )

    spec = with_timing_case(kept_rows({"x": within * 4, "y": within * 2})).definition.spec
    assert [c.case_id for c in spec.cases if c.timing] == ["y"]
    assert "the smallest: every case is over 256 MiB" in spec.description
