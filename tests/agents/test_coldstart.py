"""The cpu-c cold-start documents: they load, stay small, agree with the evaluator's code, and
their example kernels compile, pass the symbol vetting and compute the right numbers."""

from __future__ import annotations

import ctypes
import functools
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from apps.agents.coldstart import cold_start_documents
from apps.agents.context import Tier, pack
from apps.core.tokens import count_tokens
from apps.devices.cpu_c.build import ALLOWED_EXTRA_FLAGS, BASE_FLAGS
from apps.devices.cpu_c.harness import Call, load_kernel
from apps.devices.symbols import symbol_problems
from apps.memory.coldstart import document_text, first_section

HEADER_DIR = Path(__file__).resolve().parents[2] / "apps" / "devices" / "cpu_c"
EXAMPLE_OPERATORS = ["axpby", "row_sum", "softmax_rows", "gemm"]
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


# --- the documents ----------------------------------------------------------------------------


def test_cpu_c_documents_load_as_cold_items_most_useful_first() -> None:
    documents = cold_start_documents("cpu-c")
    assert [d.key for d in documents] == [
        "doc:cpu-c:cheatsheet", "doc:cpu-c:debugging", "doc:cpu-c:examples",
    ]  # fmt: skip
    assert all(d.tier is Tier.COLD for d in documents)
    assert [d.priority for d in documents] == sorted((d.priority for d in documents), reverse=True)
    for document in documents:
        assert document.text.startswith("# ")
        assert document.short_text is not None
        assert document.short_text.startswith("# ") and "\n## Essentials\n" in document.short_text
        assert document.text.startswith(document.short_text.rstrip())


@pytest.mark.parametrize("document", cold_start_documents("cpu-c"), ids=lambda d: d.key)
def test_documents_fit_a_sane_size(document: object) -> None:
    text, short = document.text, document.short_text  # type: ignore[attr-defined]
    assert 500 < count_tokens(text) < 3000
    assert count_tokens(short) < 400


def test_unknown_target_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no cold-start documents for target 'ascend-c'.*cpu-c"):
        cold_start_documents("ascend-c")


def test_packing_a_small_budget_keeps_the_short_forms() -> None:
    packed = pack(cold_start_documents("cpu-c"), 800)
    assert {a.state for a in packed.admissions} <= {"admitted", "shortened"}
    assert "shortened" in {a.state for a in packed.admissions}
    assert packed.tokens <= 800


def test_first_section_ignores_headings_inside_code_fences() -> None:
    markdown = "# T\n\nintro\n\n## One\n\n```c\n## not a heading\n```\n\n## Two\n\nmore\n"
    assert first_section(markdown) == "# T\n\nintro\n\n## One\n\n```c\n## not a heading\n```\n"
    assert first_section("# T\n\n## Only\n\ntext\n") == "# T\n\n## Only\n\ntext\n"


def test_cheatsheet_lists_exactly_the_flags_the_evaluator_allows() -> None:
    cheatsheet = document_text("cpu-c", "cheatsheet")
    allowed_section = cheatsheet.split("Allowed extra flags, nothing else:", 1)[1].split("\n2.")[0]
    listed = set(re.findall(r"-[\w=-]+", allowed_section))
    assert listed == ALLOWED_EXTRA_FLAGS
    assert " ".join(BASE_FLAGS) in cheatsheet


def test_cheatsheet_dtype_codes_match_the_header() -> None:
    header = (HEADER_DIR / "kope_kernel.h").read_text()
    codes = dict(re.findall(r"(KOPE_[A-Z0-9]+) = (\d+)", header))
    assert len(codes) == 6
    cheatsheet = document_text("cpu-c", "cheatsheet")
    assert dict(re.findall(r"(KOPE_[A-Z0-9]+) = (\d+)", cheatsheet)) == codes


# --- the example kernels ----------------------------------------------------------------------


def example_sources() -> dict[str, str]:
    """The ```c blocks of examples.md, by the operator named in each one's first comment."""
    blocks = re.findall(r"```c\n(.*?)```", document_text("cpu-c", "examples"), re.DOTALL)
    by_operator = {}
    for block in blocks:
        match = re.match(r"/\* (\w+):", block)
        assert match, f"an example starts without its operator: {block[:60]!r}"
        by_operator[match.group(1)] = block
    return by_operator


def test_examples_cover_the_four_patterns() -> None:
    assert sorted(example_sources()) == sorted(EXAMPLE_OPERATORS)


@pytest.fixture(scope="module")
def built_examples(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Compiles each example on first use, so a broken one fails only its own tests."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    folder = tmp_path_factory.mktemp("examples")
    sources = example_sources()

    @functools.cache
    def build(operator: str) -> Path:
        return compiled(sources[operator], folder / operator)

    return build


def compiled(source: str, stem: Path) -> Path:
    source_file, shared_object = stem.with_suffix(".c"), stem.with_suffix(".so")
    source_file.write_text(source)
    warnings_are_errors = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror"]
    result = subprocess.run(
        ["gcc", *BASE_FLAGS, *warnings_are_errors, f"-I{HEADER_DIR}", str(source_file),
         "-o", str(shared_object), "-lm"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return shared_object


@needs_gcc
@pytest.mark.parametrize("operator", EXAMPLE_OPERATORS)
def test_example_compiles_and_passes_the_symbol_vetting(
    built_examples: Callable[[str], Path], operator: str
) -> None:
    assert symbol_problems(built_examples(operator)) == []


@pytest.fixture(params=[1, 3], ids=lambda n: f"{n}thread")
def threads(request: pytest.FixtureRequest) -> Iterator[int]:
    """The OpenMP thread count the kernels run with: serial and parallel paths both run."""
    libgomp = ctypes.CDLL("libgomp.so.1")  # the instance the kernels' libgomp resolves to
    before = libgomp.omp_get_max_threads()
    libgomp.omp_set_num_threads(request.param)
    yield request.param
    libgomp.omp_set_num_threads(before)


def run_kernel(
    shared_object: Path, inputs: list[np.ndarray], output_shapes: list[tuple[int, ...]],
    attrs: tuple[float, ...] = (),
) -> list[np.ndarray]:  # fmt: skip
    """Call the kernel as the evaluator does: outputs start as NaN, inputs must not change."""
    outputs = [np.full(shape, np.nan, dtype=np.float32) for shape in output_shapes]
    before = [array.copy() for array in inputs]
    status = Call(load_kernel(str(shared_object)), inputs, outputs, list(attrs))()
    assert status == 0
    for original, after in zip(before, inputs, strict=True):
        assert np.array_equal(original, after), "the kernel wrote its inputs"
    return outputs


def assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert not np.isnan(actual).any(), "unwritten (NaN) elements"
    np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-3)


def floats(rng: np.random.Generator, *shape: int, spread: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * spread).astype(np.float32)


# Shapes as the built-in operators' cases have them: single elements, odd tails, long rows,
# large offsets and spreads, tiles that do not divide the sizes.
AXPBY_CASES = [(1, 2.0, -0.5), (7, 1.0, 1.0), (100_003, 1.5, -2.0), (65_537, 0.0, 1.0)]
ROW_SUM_CASES = [
    (1, 1, 0.0), (3, 17, 0.0), (1000, 3, 0.0), (1, 1_000_003, 1000.0), (2, 300_001, 0.0),
    (4, 500_009, 1000.0),
]  # fmt: skip
SOFTMAX_CASES = [(1, 1, 1.0), (3, 17, 1.0), (33, 129, 80.0), (5, 100_003, 1.0), (10_007, 3, 1.0)]
GEMM_CASES = [(1, 1, 1), (3, 5, 7), (17, 31, 13), (5, 4099, 3), (65, 300, 260), (130, 70, 513)]


@needs_gcc
@pytest.mark.parametrize(("n", "alpha", "beta"), AXPBY_CASES)
def test_axpby_example_is_correct(
    built_examples: Callable[[str], Path], threads: int, n: int, alpha: float, beta: float
) -> None:
    rng = np.random.default_rng(n)
    x, y = floats(rng, n), floats(rng, n)
    (out,) = run_kernel(built_examples("axpby"), [x, y], [(n,)], (alpha, beta))
    assert_close(out, alpha * x.astype(np.float64) + beta * y.astype(np.float64))


@needs_gcc
@pytest.mark.parametrize(("rows", "cols", "offset"), ROW_SUM_CASES)
def test_row_sum_example_is_correct(
    built_examples: Callable[[str], Path], threads: int, rows: int, cols: int, offset: float
) -> None:
    rng = np.random.default_rng(cols)
    x = floats(rng, rows, cols) + np.float32(offset)
    (out,) = run_kernel(built_examples("row_sum"), [x], [(rows,)])
    assert_close(out, x.astype(np.float64).sum(axis=1))


@needs_gcc
@pytest.mark.parametrize(("rows", "cols", "spread"), SOFTMAX_CASES)
def test_softmax_example_is_correct(
    built_examples: Callable[[str], Path], threads: int, rows: int, cols: int, spread: float
) -> None:
    rng = np.random.default_rng(rows * cols)
    x = floats(rng, rows, cols, spread=spread)
    (y,) = run_kernel(built_examples("softmax_rows"), [x], [(rows, cols)])
    shifted = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    assert_close(y, shifted / shifted.sum(axis=1, keepdims=True))


@needs_gcc
@pytest.mark.parametrize(("m", "k", "n"), GEMM_CASES)
def test_gemm_example_is_correct(
    built_examples: Callable[[str], Path], threads: int, m: int, k: int, n: int
) -> None:
    rng = np.random.default_rng(m * k * n)
    a, b = floats(rng, m, k), floats(rng, k, n)
    (c,) = run_kernel(built_examples("gemm"), [a, b], [(m, n)])
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64))
