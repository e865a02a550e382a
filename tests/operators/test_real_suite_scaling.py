"""KernelBench sizes that constrain each other, the scale backed off where the reference fails,
and the smaller and odd-sized cases derived for validation. Real imports: every reference
runs in the sandboxed child."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from apps.accounts.models import Team
from apps.operators.models import Operator, OperatorVersion
from apps.operators.scaling import odd_constants, scaled_constants
from tests.operators.conftest import SAMPLES
from tests.operators.test_importers import outcomes, run_import

pytestmark = pytest.mark.usefixtures("short_reference_limits")

LEVEL1 = SAMPLES / "kernelbench" / "level1"
RELU = (LEVEL1 / "1_ReLU.py").read_text()


def problems(tmp_path: Path, *names: str) -> Path:
    (tmp_path / "level1").mkdir(parents=True)
    for name in names:
        shutil.copy(LEVEL1 / name, tmp_path / "level1")
    return tmp_path


def relu_that(tmp_path: Path, name: str, condition: str, complaint: str) -> Path:
    """The ReLU sample, raising `complaint` unless `condition` holds for its input x."""
    (tmp_path / "level1").mkdir()
    guarded = RELU.replace(
        "        return torch.relu(x)",
        f"        if not ({condition}):\n            raise ValueError({complaint!r})\n"
        "        return torch.relu(x)",
    )
    (tmp_path / "level1" / name).write_text(guarded)
    return tmp_path


def default_case(slug: str) -> dict[str, object]:
    version = OperatorVersion.objects.get(operator__slug=slug)
    return version.cases.get(case_id="default").params


# --- 4. the scale backed off, sizes kept together ----------------------------------------


def test_sizes_are_shrunk_together_where_plain_scaling_breaks_the_problem() -> None:
    constants = {"batch_size": 2, "in_channels": 40, "out_channels": 80, "groups": 8,
                 "kernel_size": 7, "height": 16, "input_shape": [64]}  # fmt: skip
    plain = scaled_constants(constants, 0.25, together=False)
    together = scaled_constants(constants, 0.25, together=True)

    assert plain == {**constants, "in_channels": 10, "out_channels": 20, "height": 4}
    # Channels stay multiples of the groups, the input at least the kernel, tuples move too.
    assert together == {**constants, "in_channels": 8, "out_channels": 16, "height": 8,
                        "input_shape": [16]}  # fmt: skip
    assert odd_constants({"n": 64, "m": 40, "k": 2, "s": [18]}, {"n": 16, "m": 10, "k": 2,
                         "s": [4]}) == {"n": 16, "m": 10, "k": 2, "s": [4]}  # fmt: skip
    assert odd_constants({"n": 64, "s": [18]}, {"n": 16, "s": [4]}) == {"n": 17, "s": [5]}


@pytest.mark.parametrize(
    ("problem", "slug", "reason", "sizes"),
    [
        ("8_Conv_groups.py", "kb_l1_8_conv_groups",
         "ValueError: in_channels must be divisible by groups (the problem file line 10)",
         {"in_channels": 8, "out_channels": 16, "groups": 8, "height": 8}),
        ("9_Max_pool_wide_window.py", "kb_l1_9_max_pool_wide_window",
         "RuntimeError: Given input size: (3x4x4). Calculated output size: (3x0x0). Output "
         "size is too small (the problem file line 13)",
         {"height": 8, "width": 8, "kernel_size": 7}),
        ("10_HingeLoss.py", "kb_l1_10_hinge_loss",
         "RuntimeError: The size of tensor a (64) must match the size of tensor b (16) at "
         "non-singleton dimension 1 (the problem file line 13)",
         {"batch_size": 16, "input_shape": [16]}),
    ],
)  # fmt: skip
def test_a_problem_whose_sizes_constrain_each_other_imports_at_the_scale_asked(
    team: Team, tmp_path: Path, problem: str, slug: str, reason: str, sizes: dict[str, object]
) -> None:
    run = run_import(problems(tmp_path, problem), team, scale=0.25)

    assert outcomes(run) == {f"level1/{problem}": (
        "imported", "imported at scale 0.25 with sizes kept together, the reference failing "
        f"at scale 0.25: case default: {reason}")}  # fmt: skip
    version = OperatorVersion.objects.get(operator__slug=slug)
    assert version.scale == 0.25 and version.reference_source["sizes"] == "together"
    assert default_case(slug).items() >= sizes.items()


def test_a_problem_failing_at_the_scale_asked_is_imported_at_a_larger_one(
    team: Team, tmp_path: Path
) -> None:
    run = run_import(problems(tmp_path, "11_Conv_dilated.py"), team, scale=0.25)

    failure = ("RuntimeError: Calculated padded input size per channel: (16 x 16). Kernel size: "
               "(17 x 17). Kernel size can't be greater than actual input size (the problem "
               "file line 14)")  # fmt: skip
    assert outcomes(run) == {"level1/11_Conv_dilated.py": (
        "imported", f"imported at scale 0.5, the reference failing at scale 0.25: case default: "
        f"{failure}; left out case derived-small: {failure}")}  # fmt: skip
    version = OperatorVersion.objects.get(operator__slug="kb_l1_11_conv_dilated")
    assert version.scale == 0.5 and version.reference_source["scale"] == 0.5
    assert default_case("kb_l1_11_conv_dilated")["height"] == 32

    again = run_import(problems(tmp_path / "again", "11_Conv_dilated.py"), team, scale=0.25)
    assert [line["outcome"] for line in again.report] == ["unchanged"]


def test_a_problem_that_runs_only_at_full_size_is_imported_at_scale_1(
    team: Team, tmp_path: Path
) -> None:
    root = relu_that(tmp_path, "1_Full.py", "x.shape[-1] == 1024", "only 1024 wide")

    run = run_import(root, team, scale=0.25)

    [(outcome, reason)] = outcomes(run).values()
    assert outcome == "imported"
    assert reason.startswith(
        "imported at scale 1, the reference failing at scale 0.25: case default: ValueError: "
        "only 1024 wide (the problem file line 13); at scale 0.5: case default: ValueError: "
    )
    assert OperatorVersion.objects.get(operator__slug="kb_l1_1_full").scale == 1.0


def test_a_problem_that_runs_at_no_scale_fails_naming_each_scale_tried(
    team: Team, tmp_path: Path
) -> None:
    root = relu_that(tmp_path, "1_Never.py", "x.shape[-1] == 999", "never")

    run = run_import(root, team, scale=0.5)

    never = "case default: ValueError: never (the problem file line 13)"
    assert outcomes(run) == {"level1/1_Never.py": (
        "failed", f"the reference fails at every size tried: at scale 0.5: {never}; at scale 1: "
        f"{never}")}  # fmt: skip
    assert not Operator.objects.filter(team=team).exists()


# --- 5. derived cases; the case's params are its sizes -----------------------------------


def test_a_problem_gets_a_smaller_and_an_odd_sized_case_with_sizes_of_their_own(
    team: Team, tmp_path: Path
) -> None:
    run = run_import(problems(tmp_path, "1_ReLU.py", "10_HingeLoss.py"), team, scale=0.25)

    assert [line["outcome"] for line in run.report] == ["imported", "imported"]
    relu = OperatorVersion.objects.get(operator__slug="kb_l1_1_relu")
    cases = [(c.case_id, c.timing, c.params, c.inputs[0]["shape"]) for c in relu.cases.all()]
    assert cases == [
        ("default", True, {"batch_size": 4, "dim": 256}, [4, 256]),
        ("derived-small", False, {"batch_size": 2, "dim": 128}, [2, 128]),
        ("derived-odd", False, {"batch_size": 3, "dim": 129}, [3, 129]),
    ]
    hinge = OperatorVersion.objects.get(operator__slug="kb_l1_10_hinge_loss")
    assert [c.inputs[0]["shape"] for c in hinge.cases.all()] == [[16, 16], [8, 8], [9, 9]]


def test_a_derived_case_the_reference_fails_on_is_left_out_saying_why(
    team: Team, tmp_path: Path
) -> None:
    root = relu_that(tmp_path, "1_Even.py", "x.shape[-1] % 2 == 0", "even widths only")

    run = run_import(root, team, scale=0.5)

    assert outcomes(run) == {"level1/1_Even.py": (
        "imported", "left out case derived-odd: ValueError: even widths only (the problem file "
        "line 13)")}  # fmt: skip
    version = OperatorVersion.objects.get(operator__slug="kb_l1_1_even")
    assert [c.case_id for c in version.cases.all()] == ["default", "derived-small"]


WRITTEN_FOR_A_GPU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Attention, as KernelBench writes it for a GPU: half precision, on "cuda"."""

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


batch_size = 32
heads = 4
length = 64
width = 32


def get_inputs():
    shape = (batch_size, heads, length, width)
    return [torch.rand(*shape, device="cuda", dtype=torch.float16) for _ in range(3)]


def get_init_inputs():
    return []
'''


def test_a_problem_written_for_a_gpu_runs_on_the_cpu_in_float32(team: Team, tmp_path: Path) -> None:
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "97_Attention_on_cuda.py").write_text(WRITTEN_FOR_A_GPU)

    run = run_import(tmp_path, team, scale=0.5)

    assert outcomes(run)["level1/97_Attention_on_cuda.py"] == ("imported", "")
    version = OperatorVersion.objects.get(operator__team=team)
    assert {c.dtype for c in version.cases.all()} == {"float32"}
    assert [t["dtype"] for t in version.spec["inputs"]] == ["float32"] * 3
    assert version.starting_kernels.filter(target="cpu-c").exists()


A_SHAPE_COMPUTED_FROM_A_SIZE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A convolution plus a bias whose shape the problem computes from out_channels."""

    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return self.conv(x) + self.bias


batch_size = 16
in_channels = 3
out_channels = 64
height = width = 32
kernel_size = 3
bias_shape = (out_channels, 1, 1)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
'''


def test_a_shape_computed_from_a_size_follows_the_scaled_size(team: Team, tmp_path: Path) -> None:
    """KernelBench level 2 writes `bias_shape = (out_channels, 1, 1)`: three of its problems
    failed at every scale below 1 when out_channels shrank and bias_shape did not."""
    (tmp_path / "level2").mkdir()
    (tmp_path / "level2" / "2_Conv_bias.py").write_text(A_SHAPE_COMPUTED_FROM_A_SIZE)

    run = run_import(tmp_path, team, scale=0.25)

    assert outcomes(run)["level2/2_Conv_bias.py"] == ("imported", "")
    version = OperatorVersion.objects.get(operator__team=team)
    assert version.scale == 0.25
    assert all(case.params["out_channels"] < 64 for case in version.cases.all())


SIZES_WRITTEN_AS_PRODUCTS = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """KernelBench's 4_Matrix_vector_multiplication writes its sizes as products."""

    def forward(self, x):
        return x * 2


M = 100 * 10


def get_inputs():
    return [torch.randn(M)]


def get_init_inputs():
    return []
'''


def test_a_size_written_as_a_product_of_numbers_is_scaled_once(team: Team, tmp_path: Path) -> None:
    """Running the computed assignments again (for bias_shape) must not set `M = 100 * 10`
    back to its full size: it reads no size, so it stays as scaled."""
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "4_Product_sizes.py").write_text(SIZES_WRITTEN_AS_PRODUCTS)

    run = run_import(tmp_path, team, scale=0.1)

    assert outcomes(run)["level1/4_Product_sizes.py"] == ("imported", "")
    version = OperatorVersion.objects.get(operator__team=team)
    assert version.spec["inputs"][0]["shape"] == [100]
