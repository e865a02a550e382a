"""The offline policy's source transformations: on every built-in kernel they analyse the loops,
offer strategies whose results parse and compile, and the legal ones compute the same numbers
as the original."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from apps.agents.offline.cparse import first_syntax_error, parse
from apps.agents.offline.transforms import (
    SOURCE_STRATEGIES,
    LoopInfo,
    Strategy,
    TransformError,
    applicable,
    apply,
    interchange_reorders_tiles,
    interchange_stride_gain,
    loops,
    strategy_from_label,
    tile_finds_no_reuse,
    tile_splits_a_tile,
    tile_walks_in_order,
)
from apps.devices.cpu_c.harness import Call, load_kernel

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = ROOT / "apps" / "operators" / "builtin"
HEADER_DIR = ROOT / "apps" / "devices" / "cpu_c"
OPERATORS = sorted(folder.name for folder in BUILTIN.iterdir() if (folder / "naive.c").exists())
# The evaluator's flags, at -O1: these builds only check that the code compiles and computes.
FLAGS = ["-std=c11", "-O1", "-march=native", "-fopenmp", "-fPIC", f"-I{HEADER_DIR}"]
STRICT = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror"]
# Strategies that never change what a kernel computes (beyond rounding).
LEGAL = {
    "interchange", "accumulate_in_output", "tile", "restrict_pointers", "hoist_invariant",
    "unroll", "packed_gemm", "im2col_gemm", "dots_by_gemm", "weighted_sums_by_gemm", "keep_buffers",
}  # fmt: skip
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def naive(operator: str) -> str:
    return (BUILTIN / operator / "naive.c").read_text()


@functools.cache
def strategies_for(operator: str) -> tuple[Strategy, ...]:
    return tuple(applicable(naive(operator)))


def make(name: str, **params: object) -> Strategy:
    return Strategy.make(name, **params)


def loop_by_id(source: str, loop_id: str) -> LoopInfo:
    return next(info for info in loops(source) if info.id == loop_id)


def compile_c(source: str, stem: Path, shared: bool) -> subprocess.CompletedProcess[str]:
    source_file = stem.with_suffix(".c")
    source_file.write_text(source)
    output = ["-shared", "-o", str(stem.with_suffix(".so"))] if shared else ["-c", "-o",
              str(stem.with_suffix(".o"))]  # fmt: skip
    return subprocess.run(
        ["gcc", *FLAGS, *STRICT, str(source_file), *output, "-lm"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


# --- analysis and offers on every built-in kernel ---------------------------------------------


@pytest.mark.parametrize("operator", OPERATORS)
def test_every_builtin_kernel_has_loops_and_parsable_strategies(operator: str) -> None:
    source = naive(operator)
    found = loops(source)
    assert found and [info.id for info in found] == [f"L{i}" for i in range(len(found))]
    for info in found:
        assert all(loop_by_id(source, child).parent == info.id for child in info.children)
        assert info.perfect_child is None or info.perfect_child in info.children
    strategies = strategies_for(operator)
    assert strategies and {s.name for s in strategies} <= set(SOURCE_STRATEGIES)
    for strategy in strategies:
        assert strategy_from_label(strategy.label()) == strategy
        result = apply(strategy, source)
        assert result != source
        assert first_syntax_error(parse(result.encode())) is None, strategy.label()
        assert apply(strategy, source) == result  # deterministic


@needs_gcc
def test_every_applicable_strategy_compiles_without_warnings(tmp_path: Path) -> None:
    variants = [
        (f"{operator}: {strategy.label()}", apply(strategy, naive(operator)))
        for operator in OPERATORS
        for strategy in strategies_for(operator)
    ]

    def build(index: int) -> tuple[str, subprocess.CompletedProcess[str]]:
        label, source = variants[index]
        return label, compile_c(source, tmp_path / f"variant{index}", shared=False)

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [
            f"{label}\n{result.stderr}"
            for label, result in pool.map(build, range(len(variants)))
            if result.returncode != 0
        ]
    assert not failures, "\n".join(failures[:5])


def test_pragma_insertions_leave_every_other_byte_alone() -> None:
    source = naive("softmax_rows")
    for strategy in strategies_for("softmax_rows"):
        if strategy.name in ("omp_parallel_for", "omp_simd", "unroll"):
            result = apply(strategy, source).splitlines(keepends=True)
            added = [line for line in result if line.lstrip().startswith("#pragma")]
            assert len(added) == 1
            assert "".join(line for line in result if line not in added) == source


VARIANTS = """#include <stdint.h>
static void helper(float *x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = 0;
}
static int kope_variant_0(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                          int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    float *y = (float *)outputs[0].data;
    for (int64_t i = 0; i < 8; ++i) y[i] = x[i] * 2.0f;
    return 0;
}
static int kope_variant_1(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                          int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    float *y = (float *)outputs[0].data;
    for (int64_t i = 0; i < 16; ++i) y[i] = x[i] * 3.0f;
    return 0;
}
int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    int status = kope_variant_0(inputs, n_inputs, outputs, n_outputs, attrs, n_attrs);
    if (status != 2 && status != 3) return status;
    return kope_variant_1(inputs, n_inputs, outputs, n_outputs, attrs, n_attrs);
}
"""


def test_the_loops_of_a_lowered_kernels_variants_are_the_kernels_and_a_helpers_are_not() -> None:
    """The lowering writes one function per kind of call, which kope_kernel dispatches to:
    their loops are what there is to optimize; a helper's loop is no part of the kernel."""
    found = loops(VARIANTS)
    assert [(info.id, info.line) for info in found] == [("L0", 9), ("L1", 16)]

    parallel = apply(Strategy.make("omp_parallel_for", loop="L1", schedule="static"), VARIANTS)
    assert parallel.splitlines()[15].strip() == "#pragma omp parallel for schedule(static)"
    restricted = apply(Strategy.make("restrict_pointers"), VARIANTS)
    assert restricted.count("float *restrict y") == 2


# --- specific shapes ------------------------------------------------------------------------


def test_gemm_inner_loop_accumulates_acc() -> None:
    source = naive("gemm")
    outer, middle, inner = loops(source)
    assert (outer.var, middle.var, inner.var) == ("i", "j", "p")
    assert outer.perfect_child == "L1" and middle.perfect_child is None
    assert inner.reductions == [("acc", "+")] and not inner.carried
    assert middle.reductions == []  # acc is declared inside the j loop


def test_parallel_for_on_a_loop_with_a_reduction_emits_the_clause() -> None:
    gemm = apply(make("omp_parallel_for", loop="L2", schedule="static"), naive("gemm"))
    assert "#pragma omp parallel for schedule(static) reduction(+:acc)\n" in gemm
    softmax = apply(make("omp_parallel_for", loop="L1", schedule="dynamic"), naive("softmax_rows"))
    assert "#pragma omp parallel for schedule(dynamic) reduction(max:max)\n" in softmax
    collapsed = apply(
        make("omp_parallel_for", loop="L0", schedule="static", collapse=2), naive("gemm")
    )
    assert "#pragma omp parallel for schedule(static) collapse(2)\n" in collapsed


def test_parallel_for_is_not_offered_inside_a_parallel_loop() -> None:
    parallel = apply(make("omp_parallel_for", loop="L0", schedule="static"), naive("gemm"))
    assert loops(parallel)[0].has_pragma
    offered = {(s.name, s.param("loop")) for s in applicable(parallel)}
    assert ("omp_parallel_for", "L1") not in offered and ("omp_parallel_for", "L0") not in offered
    assert ("omp_simd", "L2") in offered


def test_interchange_swaps_the_headers_of_a_perfect_nest() -> None:
    transposed = apply(make("interchange", loop="L0"), naive("transpose_2d"))
    assert [info.var for info in loops(transposed)] == ["j", "i"]
    assert "for (int64_t j = 0; j < cols; ++j) {\n        for (int64_t i = 0; i < rows; ++i)" in (
        transposed
    )
    gemm = apply(make("interchange", loop="L0"), naive("gemm"))
    assert [info.var for info in loops(gemm)] == ["j", "i", "p"]


def test_accumulate_in_output_turns_gemm_into_an_i_p_j_nest() -> None:
    result = apply(make("accumulate_in_output", loop="L1"), naive("gemm"))
    found = {info.id: info for info in loops(result)}
    assert [(info.var, info.depth) for info in found.values()] == [
        ("i", 0), ("j", 1), ("p", 1), ("j", 2),
    ]  # fmt: skip
    assert found["L0"].children == ["L1", "L2"] and found["L2"].perfect_child == "L3"
    assert "C[i * n + j] = 0.0;" in result and "C[i * n + j] += " in result
    assert "acc" not in result


def test_accumulate_in_output_keeps_an_epilogue_as_a_final_pass() -> None:
    result = apply(make("accumulate_in_output", loop="L1"), naive("matmul_bias_relu"))
    assert [info.var for info in loops(result)] == ["i", "j", "p", "j", "j"]
    assert "float v = (float)(y[i * n + j] + bias[j]);" in result


def test_packed_gemm_hands_the_gemm_nest_to_the_helper_storing_into_c() -> None:
    offered = [s.label() for s in strategies_for("gemm") if s.name == "packed_gemm"]
    assert offered == [f"packed_gemm(kc={kc}, loop=L0)" for kc in (128, 256, 512)]
    result = apply(make("packed_gemm", loop="L0", kc=256), naive("gemm"))
    assert loops(result) == []  # the whole nest is the call
    assert "    kope_packed_gemm(m, n, k, A, k, 1, B, n, 1, C, n, 256);\n    return 0;" in result
    assert result.count("static inline void kope_packed_gemm(") == 1
    batched = apply(make("packed_gemm", loop="L1", kc=128), naive("batched_matmul"))
    assert "kope_packed_gemm(m, n, k, Ab, k, 1, Bb, n, 1, Cb, n, 128)" in batched
    assert [info.var for info in loops(batched)] == ["b"]
    # the call never returns early, so the batch loop can still be made parallel
    assert make("omp_parallel_for", loop="L0", schedule="static") in applicable(batched)


def test_packed_gemm_keeps_an_epilogue_as_a_loop_over_the_sums() -> None:
    """The sums land in the output, which the epilogue then reads back element by element."""
    result = apply(make("packed_gemm", loop="L0", kc=512), naive("matmul_bias_relu"))
    assert [info.var for info in loops(result)] == ["i", "j"]
    assert "kope_packed_gemm(m, n, k, x, k, 1, w, n, 1, y, n, 512)" in result
    assert "double acc = y[i * n + j];\n" in result
    assert "y[i * n + j] = v > 0.0f ? v : 0.0f;" in result


TRANSPOSED = """#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *At = (const float *)inputs[0].data; /* (k, m): A transposed */
    const float *Bt = (const float *)inputs[1].data; /* (n, k): B transposed */
    float *C = (float *)outputs[0].data;
    int64_t k = inputs[0].shape[0], m = inputs[0].shape[1], n = inputs[1].shape[0];
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (int64_t p = 0; p < k; ++p) acc += Bt[k * j + p] * At[p * m + i];
            C[(i + 1) * n - n + j] = 2.0f * acc;
        }
    }
    return 0;
}
"""


def test_packed_gemm_reads_any_strides_and_swapped_operands() -> None:
    result = apply(make("packed_gemm", loop="L0", kc=128), TRANSPOSED)
    assert "kope_packed_gemm(m, n, k, At, 1, m, Bt, 1, k, kope_sums, n, 128)" in result
    assert "float acc = kope_sums[i * n + j];" in result  # C's index is not i * ldc + j
    assert "C[(i + 1) * n - n + j] = 2.0f * acc;" in result


def assert_each_refused(
    strategy: Strategy, source: str, shapes: dict[str, tuple[str, str]], where: str
) -> None:
    """Each edit (why: (before, after)) of `source` makes `strategy` refuse it, saying where
    and why."""
    for why, (before, after) in shapes.items():
        assert before in source, before
        with pytest.raises(TransformError, match=re.escape(where) + ".*" + re.escape(why)):
            apply(strategy, source.replace(before, after))


def test_packed_gemm_refuses_what_is_not_a_float_matrix_product() -> None:
    shapes = {
        "does not start at 0": ("float acc = 0.0f;", "float acc = 1.0f;"),
        "only grow by +=": ("acc += Bt[k * j + p] * At[p * m + i];",
                            "acc -= Bt[k * j + p] * At[p * m + i];"),
        "not a product of float matrices": ("Bt[k * j + p] * At[p * m + i]",
                                            "Bt[k * j + p] * At[p * m + j]"),
        "change inside the nest": ("C[(i + 1) * n - n + j] = 2.0f * acc;",
                                   "int64_t next = m++;\n"
                                   "            C[(i + 1) * n - n + j] = 2.0f * acc;"),
        "for (v = 0; v < bound; ++v)": ("int64_t p = 0; p < k", "int64_t p = 1; p < k"),
    }  # fmt: skip
    assert_each_refused(make("packed_gemm", loop="L0", kc=128), TRANSPOSED, shapes,
                        where="packed_gemm: loop L0 (line 10)")  # fmt: skip
    doubles = TRANSPOSED.replace(
        "const float *At = (const float *)", "const double *At = (const double *)"
    )
    with pytest.raises(TransformError, match="not a product of float matrices"):
        apply(make("packed_gemm", loop="L0", kc=128), doubles)
    with pytest.raises(TransformError, match="kc must be one of 128, 256, 512"):
        apply(make("packed_gemm", loop="L0", kc=100), TRANSPOSED)


def test_im2col_gemm_lowers_the_convolution_to_one_gemm() -> None:
    offered = [s.label() for s in strategies_for("conv2d") if s.name == "im2col_gemm"]
    assert offered == [f"im2col_gemm(kc={kc}, loop=L1)" for kc in (128, 256, 512)]
    result = apply(make("im2col_gemm", loop="L1", kc=256), naive("conv2d"))
    assert "const int64_t kope_depth = c * r * s;" in result
    assert "kope_patches[((ch * r + p) * s + q) * kope_cols + i * ow + j] = x[" in result
    assert "memset(kope_patches + ch * (r * s) * kope_cols, 0," in result
    assert "kope_weights[o * kope_depth + (ch * r + p) * s + q] = weight[" in result
    assert (
        "kope_packed_gemm(k, kope_cols, kope_depth, kope_weights, kope_depth, 1, kope_patches, "
        "kope_cols, 1, kope_sums, kope_cols, 256);"
    ) in result
    assert "acc += kope_sums[o * kope_cols + i * ow + j];" in result
    # the fill for unit strides, the fill for any, the fallback
    assert result.count("if (row < 0 || row >= h) continue;") == 3
    unit_fill = result.split("if (stride == 1) {")[1].split("} else {")[0]
    assert "int64_t row = i * 1 - padding + p;" in unit_fill
    assert "int64_t col = j * 1 - padding + q;" in unit_fill
    assert "stride" not in unit_fill
    assert result.count("static inline void kope_packed_gemm(") == 1
    assert "return" not in result.split("kope_sums =")[1].split("return 0;")[0]  # no early exit


def test_im2col_gemm_writes_a_unit_stride_fill_only_for_a_signed_integer_stride() -> None:
    declared = "int64_t stride = (int64_t)attrs[0], padding = (int64_t)attrs[1];"
    for stride_type in ("double", "uint64_t"):
        source = naive("conv2d").replace(
            declared,
            f"{stride_type} stride = ({stride_type})attrs[0];\n"
            "    int64_t padding = (int64_t)attrs[1];",
        )
        assert source != naive("conv2d")

        result = apply(make("im2col_gemm", loop="L1", kc=256), source)

        assert "if (stride == 1)" not in result, stride_type
        assert result.count("int64_t col = j * stride - padding + q;") == 2  # fill, fallback


def test_im2col_gemm_refuses_what_is_not_a_windowed_product() -> None:
    source = naive("conv2d")
    shapes = {
        "only grow by +=": ("acc += (double)x", "acc -= (double)x"),
        "reads more than o": ("weight[((o * c + ch) * r + p) * s + q]",
                              "weight[((o * c + ch) * r + p) * s + j]"),
        "not exactly one side": ("weight[((o * c + ch) * r + p) * s + q]",
                                 "weight[((c + ch) * r + p) * s + q]"),
        "not a window": ("int64_t col = j * stride - padding + q;",
                         "int64_t col = j * stride - padding + q; y[0] = 0;"),
        "the window writes padding": ("int64_t col = j * stride - padding + q;",
                                      "int64_t col = j * stride - (padding = 1) + q;"),
        "reads o outside the sum": ("if (row < 0 || row >= h) continue;",
                                    "if (row < 0 || row >= h + o) continue;"),
        "do not end in one store": ("y[((b * k + o) * oh + i) * ow + j] = (float)acc;",
                                    "y[((b * k + o) * oh + i) * ow + j] += (float)acc;"),
    }  # fmt: skip
    assert_each_refused(make("im2col_gemm", loop="L1", kc=128), source, shapes,
                        where="im2col_gemm: loop L1 (line 17)")  # fmt: skip
    with pytest.raises(TransformError, match="no perfectly nested loop"):
        apply(make("im2col_gemm", loop="L3", kc=128), source)
    with pytest.raises(TransformError, match="is not a product"):  # a pooling window
        apply(make("im2col_gemm", loop="L1", kc=128), naive("avg_pool2d"))


def test_im2col_gemm_leaves_the_fallback_of_its_own_lowering_alone() -> None:
    lowered = apply(make("im2col_gemm", loop="L1", kc=512), naive("conv2d"))

    assert not [s for s in applicable(lowered) if s.name == "im2col_gemm"]
    with pytest.raises(TransformError, match=r"loop L18 .* is the fallback of a lowering"):
        apply(make("im2col_gemm", loop="L18", kc=512), lowered)


def test_dots_by_gemm_computes_the_scores_of_every_row_first() -> None:
    for operator in ("attention", "causal_attention"):
        offered = [s.label() for s in strategies_for(operator) if s.name == "dots_by_gemm"]
        assert offered == [f"dots_by_gemm(kc={kc}, loop=L2)" for kc in (128, 256, 512)]
    result = apply(make("dots_by_gemm", loop="L2", kc=256), naive("attention"))
    lowered, fallback = result[result.index("int kope_kernel(") :].split("} else {")
    assert "kope_scratch(5, (size_t)sq * (size_t)skv + 1, &kope_held);" in lowered
    assert "kope_packed_gemm(sq, skv, d, qh, d, 1, kh, 1, d, kope_dots, skv, 256);" in lowered
    assert "double dot = kope_dots[i * skv + j];\n" in lowered
    assert "dot +=" not in lowered.split("kope_dots[i * skv + j]")[1]
    assert "dot += (double)qh[i * d + e] * kh[j * d + e];" in fallback  # no memory: as it was
    assert "kope_scratch_done(5, kope_dots, kope_held);" in fallback
    causal = apply(make("dots_by_gemm", loop="L2", kc=128), naive("causal_attention"))
    # row i reads keys 0..i: the tiles right of the diagonal are left out
    assert ("kope_masked_gemm(s, s, d, qh, d, 1, kh, 1, d, kope_dots, s, 128, KOPE_C_LOWER);"
            in causal)  # fmt: skip
    assert "double dot = kope_dots[i * s + j];" in causal


def test_dots_by_gemm_refuses_what_is_not_a_row_of_dot_products() -> None:
    shapes = {
        "one scalar set to 0": ("double dot = 0.0;", "double dot = 1.0;"),
        "not one `dot += ...;`": ("dot += (double)qh", "dot -= (double)qh"),
        "dot changes after its sum": ("p[j] = dot * scale;", "p[j] = dot *= scale;"),
        "not a product of float matrices": ("kh[j * d + e];", "kh[e];"),
        "neither to a bound of its own nor to i inclusive": (
            "for (int64_t j = 0; j < skv; ++j) {\n                double dot",
            "for (int64_t j = 0; j <= skv; ++j) {\n                double dot",
        ),
        "qh change inside L1": ("p[j] = dot * scale;", "p[j] = dot * scale; qh = k;"),
        "not a statement of L1's body itself": (
            "for (int64_t j = 0; j < skv; ++j) {\n                double dot",
            "if (i < skv) for (int64_t j = 0; j < skv; ++j) {\n                double dot",
        ),
        "do not all run": ("for (int64_t e = 0; e < d; ++e) {\n                    dot",
                           "for (int64_t e = 1; e < d; ++e) {\n                    dot"),
    }  # fmt: skip
    assert_each_refused(make("dots_by_gemm", loop="L2", kc=128), naive("attention"), shapes,
                        where="dots_by_gemm: loop L2 (line 32)")  # fmt: skip
    with pytest.raises(TransformError, match="not inside a loop over rows"):
        apply(make("dots_by_gemm", loop="L0", kc=128), naive("attention"))
    with pytest.raises(TransformError, match="packed_gemm lowers such a nest"):
        apply(make("dots_by_gemm", loop="L1", kc=128), naive("gemm"))
    parallel = apply(make("omp_parallel_private", loop="L0"), naive("attention"))
    with pytest.raises(TransformError, match="which has an omp pragma"):
        apply(make("dots_by_gemm", loop="L2", kc=128), parallel)


def test_dots_by_gemm_leaves_the_fallback_of_its_own_lowering_alone() -> None:
    lowered = apply(make("dots_by_gemm", loop="L2", kc=512), naive("attention"))

    assert not [s for s in applicable(lowered) if s.name == "dots_by_gemm"]
    with pytest.raises(TransformError, match=r"loop L10 .* is the fallback of a lowering"):
        apply(make("dots_by_gemm", loop="L10", kc=512), lowered)


def test_weighted_sums_by_gemm_computes_every_row_s_sums_by_one_gemm() -> None:
    for operator in ("attention", "causal_attention"):
        offered = [s.label() for s in strategies_for(operator)
                   if s.name == "weighted_sums_by_gemm"]  # fmt: skip
        assert offered == [f"weighted_sums_by_gemm(kc={kc}, loop=L6)" for kc in (128, 256, 512)]
    result = apply(make("weighted_sums_by_gemm", loop="L6", kc=256), naive("attention"))
    lowered, fallback = result[result.index("int kope_kernel(") :].split("} else {")
    first, second = lowered.split("kope_packed_gemm(sq, d, skv, kope_weights, skv, 1, vh, d, 1, "
                                  "kope_sums, d, 256);")  # fmt: skip
    assert "for (int64_t j = 0; j < skv; ++j) kope_weights[i * skv + j] = (float)p[j];" in first
    assert "kope_sum_rows[i] = sum;" in first and "acc[e]" not in first
    assert "double sum = kope_sum_rows[i];" in second
    # a scalar of the row's own that the rest reads is kept per row too
    with_max = naive("attention").replace("(float)(acc[e] / sum)", "(float)(acc[e] / sum + max)")
    kept = apply(make("weighted_sums_by_gemm", loop="L6", kc=256), with_max)
    assert "double max = kope_max_rows[i];" in kept and "kope_max_rows[i] = max;" in kept
    assert "outh[i * d + e] = (float)(kope_sums[i * d + e] / sum);" in second
    assert "acc[e] += p[j] * vh[j * d + e];" in fallback  # no memory: as it was
    assert "free(kope_sum_rows);" in fallback
    causal = apply(make("weighted_sums_by_gemm", loop="L6", kc=128), naive("causal_attention"))
    # row i weighs values 0..i: the rest of its row of weights is zero
    assert ("for (int64_t j = 0; j <= i; ++j) kope_weights[i * s + j] = (float)p[j];\n"
            in causal)  # fmt: skip
    assert "memset(kope_weights + i * s + i + 1, 0, sizeof(float) * (size_t)(s - i - 1));" in (
        causal
    )
    # so each row's sums stop at the row's own key
    assert ("kope_masked_gemm(s, d, s, kope_weights, s, 1, vh, d, 1, kope_sums, d, 128, "
            "KOPE_A_LOWER);" in causal)  # fmt: skip


@pytest.mark.parametrize("strategy", ["dots_by_gemm(kc=128, loop=L2)",
                                      "weighted_sums_by_gemm(kc=128, loop=L6)"])  # fmt: skip
def test_a_causal_lowering_is_refused_beside_a_helper_without_the_masked_gemm(
    strategy: str,
) -> None:
    """A kernel lowered before the masked GEMM existed has a helper without it: the causal
    lowerings say so instead of calling what is not there."""
    lowered = apply(make("packed_gemm", loop="L0", kc=128), naive("gemm"))
    helper = lowered[: lowered.index("int kope_kernel(")]
    older = helper.replace("kope_masked_gemm", "kope_gemm_of_old")
    with pytest.raises(TransformError, match="an older kope_packed_gemm, without kope_masked_gemm"):
        apply(strategy_from_label(strategy), older + naive("causal_attention"))
    assert "kope_masked_gemm(" in apply(strategy_from_label(strategy),
                                        helper + naive("causal_attention"))  # fmt: skip


def test_weighted_sums_by_gemm_refuses_a_row_loop_it_cannot_run_in_two_passes() -> None:
    shapes = {
        "not set acc[0..d) to 0": ("for (int64_t e = 0; e < d; ++e) acc[e] = 0.0;",
                                   "for (int64_t e = 0; e < d; ++e) acc[e] = 1.0;"),
        "is not one `acc[e] += w[j] * V[j,e];`": ("acc[e] += p[j] * vh[j * d + e];",
                                                  "acc[e] += p[j] * vh[e];"),
        "L1 leaves a row early": ("double sum = 0.0;",
                                  "double sum = 0.0; if (max > 1e30) continue;"),
        "reads the weights": ("(float)(acc[e] / sum)", "(float)(acc[e] / sum + p[0])"),
        "reads acc other than as acc[x]": ("(float)(acc[e] / sum)", "(float)(*acc / sum)"),
        "acc is used before its sums are zeroed": ("double sum = 0.0;",
                                                   "double sum = acc[0];"),
        "vh change inside L1": ("double sum = 0.0;", "double sum = 0.0; vh = k;"),
    }  # fmt: skip
    assert_each_refused(make("weighted_sums_by_gemm", loop="L6", kc=128), naive("attention"),
                        shapes, where="weighted_sums_by_gemm: loop L6 (line 48)")  # fmt: skip
    scale_per_row = naive("attention").replace(
        "double sum = 0.0;", "double sum = 0.0; scale *= 1.0;").replace(
        "(float)(acc[e] / sum)", "(float)(acc[e] / sum * scale)")  # fmt: skip
    with pytest.raises(TransformError, match="reads scale, which the row sets before them"):
        apply(make("weighted_sums_by_gemm", loop="L6", kc=128), scale_per_row)
    row_array = naive("attention").replace(
        "double sum = 0.0;", "double sum = 0.0; double two[2] = {1.0, 2.0};").replace(
        "(float)(acc[e] / sum)", "(float)(acc[e] / sum * two[1])")  # fmt: skip
    with pytest.raises(TransformError, match="reads two, which the row sets before them"):
        apply(make("weighted_sums_by_gemm", loop="L6", kc=128), row_array)
    with pytest.raises(TransformError, match="not a statement of a row loop's body"):
        apply(make("weighted_sums_by_gemm", loop="L0", kc=128), naive("attention"))
    parallel = apply(make("omp_parallel_private", loop="L0"), naive("attention"))
    with pytest.raises(TransformError, match="which has an omp pragma"):
        apply(make("weighted_sums_by_gemm", loop="L6", kc=128), parallel)


def test_weighted_sums_by_gemm_leaves_the_fallback_of_its_own_lowering_alone() -> None:
    lowered = apply(make("weighted_sums_by_gemm", loop="L6", kc=512), naive("attention"))

    offered = [s.label() for s in applicable(lowered) if s.name == "weighted_sums_by_gemm"]
    assert offered == []


@pytest.mark.parametrize(
    ("operator", "lowering"),
    [("conv2d", make("im2col_gemm", loop="L1", kc=512)),
     ("attention", make("dots_by_gemm", loop="L2", kc=256)),
     ("attention", make("weighted_sums_by_gemm", loop="L6", kc=512)),
     ("causal_attention", make("dots_by_gemm", loop="L2", kc=256)),
     ("causal_attention", make("weighted_sums_by_gemm", loop="L6", kc=512))],
)  # fmt: skip
def test_no_strategy_is_offered_on_a_fallback_that_runs_only_without_memory(
    operator: str, lowering: Strategy
) -> None:
    lowered = apply(lowering, naive(operator))
    helper_call = re.compile(r"kope_(packed|masked)_gemm\(").search(
        lowered, lowered.index("int kope_kernel(")
    )
    assert helper_call is not None
    else_at = lowered.index("} else {", helper_call.start())
    first, last = (lowered[:at].count("\n") + 1
                   for at in (else_at, lowered.index("kope_scratch_done(", else_at)))  # fmt: skip
    fallback_loops = {info.id for info in loops(lowered) if first < info.line < last}
    assert fallback_loops  # the nest as it was is there, loops and all

    on_fallback = [s.label() for s in applicable(lowered) if s.param("loop") in fallback_loops]

    assert on_fallback == []
    with pytest.raises(TransformError, match="is the fallback of a lowering"):
        apply(make("float_accumulator", loop=sorted(fallback_loops)[0]), lowered)


def test_omp_parallel_private_gives_each_thread_its_own_scratch_buffers() -> None:
    for operator in ("attention", "causal_attention"):
        offered = [s.label() for s in strategies_for(operator) if s.name == "omp_parallel_private"]
        assert offered == ["omp_parallel_private(loop=L0)"]
    result = apply(make("omp_parallel_private", loop="L0"), naive("attention"))
    region = result.split("#pragma omp parallel\n", 1)[1]
    assert region.index("double *p = malloc((size_t)skv * sizeof(double));") < region.index(
        "#pragma omp for schedule(static)\n"
    )
    assert "int kope_ready = p != NULL && acc != NULL;" in region
    assert (
        "for (int64_t hd = 0; hd < heads; ++hd) {\n                if (!kope_ready) continue;"
        in (region)
    )
    assert "if (kope_failed) return 1;" in region
    with pytest.raises(TransformError, match="uses no buffer declared before it"):
        apply(make("omp_parallel_private", loop="L0"), naive("gemm"))
    with pytest.raises(TransformError, match="is inside another loop"):
        apply(make("omp_parallel_private", loop="L1"), naive("attention"))
    # a buffer read after the loop carries a result out of it: it stays shared
    read_after = naive("attention").replace(
        "    free(p);\n", "    out[0] = (float)p[0];\n    free(p);\n"
    )
    shared_p = apply(make("omp_parallel_private", loop="L0"), read_after)
    assert "int kope_ready = acc != NULL;" in shared_p


@needs_gcc
def test_omp_parallel_private_computes_what_the_serial_kernel_did(tmp_path: Path) -> None:
    """Eight heads over the threads, each thread with its own rows of scores."""
    q_shape, kv_shape = (2, 4, 5, 8), (2, 4, 9, 8)
    problem = Problem(
        lambda rng: [floats(rng, *q_shape), floats(rng, *kv_shape), floats(rng, *kv_shape)],
        like(*q_shape),
    )
    variants = [naive("attention"), apply(make("omp_parallel_private", loop="L0"),
                                          naive("attention"))]  # fmt: skip
    outputs = []
    for index, source in enumerate(variants):
        result = compile_c(source, tmp_path / f"attention{index}", shared=True)
        assert result.returncode == 0, result.stderr
        outputs.append(run_kernel(tmp_path / f"attention{index}.so", problem)[0])
    assert not np.isnan(outputs[0]).any()
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-6, atol=1e-7)


def test_tile_turns_transpose_into_four_nested_loops() -> None:
    result = apply(make("tile", loop="L0", size=32), naive("transpose_2d"))
    found = loops(result)
    assert [(info.var, info.depth) for info in found] == [("ii", 0), ("jj", 1), ("i", 2), ("j", 3)]
    assert all(info.perfect_child == f"L{n + 1}" for n, info in enumerate(found[:-1]))
    assert "for (int64_t i = ii; i < (ii + 32 < rows ? ii + 32 : rows); ++i)" in result


@pytest.mark.parametrize("operator", OPERATORS)
def test_restrict_pointers_marks_every_data_pointer(operator: str) -> None:
    source = naive(operator)
    result = apply(make("restrict_pointers"), source)
    data_lines = [line for line in source.splitlines() if ".data;" in line]
    restricted = [line for line in result.splitlines() if ".data;" in line]
    assert data_lines and len(restricted) == len(data_lines)
    assert all("*restrict " in line for line in restricted)
    assert result.count("restrict") == len(data_lines)


def test_restrict_pointers_leaves_two_pointers_to_one_tensor_alone() -> None:
    """`restrict` on both would promise gcc that the output's total and its elements never
    share memory."""
    source = naive("relu").replace(
        "    float *y = (float *)outputs[0].data;\n",
        "    float *y = (float *)outputs[0].data;\n    float *total = (float *)outputs[0].data;\n",
    )
    result = apply(make("restrict_pointers"), source)
    assert "float *total = (float *)outputs[0].data;" in result
    assert "float *y = (float *)outputs[0].data;" in result
    assert "*restrict x = " in result


def test_cumsum_scan_is_offered_simd_with_a_reduction() -> None:
    source = naive("cumsum")
    inner = loops(source)[1]
    assert inner.reductions == [("sum", "+")] and inner.carried  # a scan: the evaluator judges
    assert make("omp_simd", loop="L1") in strategies_for("cumsum")
    assert "#pragma omp simd reduction(+:sum)\n" in apply(make("omp_simd", loop="L1"), source)


def test_hoist_invariant_hoists_products_and_reciprocals() -> None:
    gemm = apply(make("hoist_invariant", loop="L2"), naive("gemm"))
    assert "const int64_t i_k = i * k;\n" in gemm and "A[i_k + p]" in gemm
    softmax = apply(make("hoist_invariant", loop="L3"), naive("softmax_rows"))
    assert "const double inv_sum = 1.0 / sum;" in softmax and "yr[c] * inv_sum" in softmax


def test_float_accumulator_makes_the_sum_float() -> None:
    result = apply(make("float_accumulator", loop="L2"), naive("gemm"))
    assert "float acc = 0.0;" in result and "acc += (float)A[" in result


def test_one_pragma_per_loop_and_positional_ids_after_a_change() -> None:
    simd = apply(make("omp_simd", loop="L2"), naive("gemm"))
    with pytest.raises(TransformError, match="L2"):
        apply(make("unroll", loop="L2", factor=4), simd)
    hoisted = apply(make("hoist_invariant", loop="L2"), naive("gemm"))
    assert [info.var for info in loops(hoisted)] == ["i", "j", "p"]  # recomputed, same order


# A kernel written the other ways C allows: braceless nests, variables declared before their
# loops, loops sharing a line, every accumulation form, an early exit, a helper with a loop.
UNUSUAL = """#include <math.h>
#include "kope_kernel.h"

static float first(const float *x, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += x[i];  /* not part of kope_kernel: ignored */
    return s;
}

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    const float *x = inputs[0].data; /* naïve: no cast */
    float *y = (float *)(outputs[0].data);
    int64_t rows = inputs[0].shape[0], cols = inputs[0].shape[1];
    int64_t i, j;
    double total = 0.0, product = 1.0;
    float best = -INFINITY, least = INFINITY;
    for (i = 0; i < rows; i++)
        for (j = 0; j < cols; j += 1)
            y[i * cols + j] = x[j * rows + i] / (float)cols;
    for (i = 0; i < rows; i++) { for (j = 0; j < cols; j++) { y[i * cols + j] += 1.0f; } }
    for (int64_t k = 0; k < rows * cols; ++k) {
        total = total + y[k];
        product *= 1.0001;
        best = fmaxf(best, y[k]);
        least = y[k] < least ? y[k] : least;
    }
    for (int64_t k = 0; k < rows; ++k) {
        if (y[k] > 100.0f) break;
        y[k] = y[k] > best ? y[k] : best;
    }
    y[0] += (float)(total + product) + least + first(x, 1);
    return 0;
}
"""


def test_unusual_c_is_analysed_and_transformed_into_code_that_compiles(tmp_path: Path) -> None:
    found = loops(UNUSUAL)
    assert [(info.var, info.depth) for info in found] == [
        ("i", 0), ("j", 1), ("i", 0), ("j", 1), ("k", 0), ("k", 0),
    ]  # fmt: skip
    assert found[0].perfect_child == "L1" and found[2].perfect_child == "L3"
    assert found[4].reductions == [
        ("total", "+"), ("product", "*"), ("best", "max"), ("least", "min"),
    ]  # fmt: skip
    assert found[0].carried  # j is declared outside: shared between the iterations of i
    offered = {s.label() for s in applicable(UNUSUAL)}
    assert "omp_simd(loop=L5)" not in offered and "unroll(factor=4, loop=L5)" in offered  # break
    assert "float_accumulator(loop=L4)" not in offered  # `double total, product`: one type
    assert {"tile(loop=L0, size=16)", "interchange(loop=L2)", "hoist_invariant(loop=L1)"} <= offered
    simd = apply(make("omp_simd", loop="L1"), UNUSUAL)
    assert "        {\n        #pragma omp simd\n        for (j = 0;" in simd  # a braceless body
    assert "reduction(+:total) reduction(*:product) reduction(max:best) reduction(min:least)" in (
        apply(make("omp_parallel_for", loop="L4", schedule="static"), UNUSUAL)
    )
    if shutil.which("gcc") is None:
        return
    for index, strategy in enumerate(applicable(UNUSUAL)):
        result = compile_c(apply(strategy, UNUSUAL), tmp_path / f"unusual{index}", shared=False)
        assert result.returncode == 0, f"{strategy.label()}\n{result.stderr}"


# A search that tests its bound inside the body: a `for` without a condition.
UNBOUNDED = """#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    float *y = (float *)outputs[0].data;
    int64_t n = inputs[0].shape[0];
    for (int64_t k = 0;; ++k) {
        if (k >= n || x[k] < 0.0f) break;
        y[k] = 2.0f * x[k];
    }
    return 0;
}
"""


def test_a_loop_without_a_condition_is_not_unrolled(tmp_path: Path) -> None:
    """gcc refuses `#pragma GCC unroll` before a loop without a condition."""
    offered = applicable(UNBOUNDED)
    assert not [strategy for strategy in offered if strategy.name == "unroll"]
    with pytest.raises(TransformError, match="condition"):
        apply(make("unroll", loop="L0", factor=4), UNBOUNDED)
    if shutil.which("gcc") is None:
        return
    for index, strategy in enumerate(offered):
        result = compile_c(apply(strategy, UNBOUNDED), tmp_path / f"unbounded{index}", shared=False)
        assert result.returncode == 0, f"{strategy.label()}\n{result.stderr}"


# --- errors -----------------------------------------------------------------------------------


def test_errors_say_what_and_where() -> None:
    with pytest.raises(TransformError, match=r"interchange: loop L2 \(line 13\)"):
        apply(make("interchange", loop="L2"), naive("gemm"))
    with pytest.raises(TransformError, match="line 1"):
        loops("int x(")
    with pytest.raises(TransformError, match="kope_kernel"):
        loops("int other(void) { return 0; }\n")
    with pytest.raises(TransformError, match="no loop L9"):
        apply(make("omp_simd", loop="L9"), naive("relu"))
    with pytest.raises(TransformError, match="factor"):
        apply(make("unroll", loop="L0", factor=3), naive("relu"))
    junk_labels = ("nonsense(", "nonsense()", "unroll(loop=L0", "unroll(color=red)", "tile(size=)",
                   "unroll(loop=L0, factor=²)")  # "²".isdigit(), and int("²") raises  # fmt: skip
    for junk in junk_labels:
        with pytest.raises(TransformError):
            strategy_from_label(junk)


def test_labels_round_trip() -> None:
    strategy = make("omp_parallel_for", schedule="static", loop="L0")
    assert strategy.label() == "omp_parallel_for(loop=L0, schedule=static)"
    assert strategy_from_label(strategy.label()) == strategy
    assert strategy.param("collapse", 1) == 1
    assert strategy_from_label("restrict_pointers()") == Strategy("restrict_pointers")


# --- the legal strategies compute the same numbers ----------------------------------------------


@dataclass(frozen=True)
class Problem:
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    outputs: Callable[[list[np.ndarray]], list[np.ndarray]]
    attrs: tuple[float, ...] = ()


def floats(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def like(*shape: int) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    return lambda _: [np.full(shape, np.nan, dtype=np.float32)]


# Sizes that the tile sizes do not divide.
PROBLEMS = {
    "gemm": Problem(lambda rng: [floats(rng, 37, 23), floats(rng, 23, 41)], like(37, 41)),
    "batched_matmul": Problem(
        lambda rng: [floats(rng, 3, 19, 23), floats(rng, 3, 23, 35)], like(3, 19, 35)
    ),
    "matmul_bias_relu": Problem(
        lambda rng: [floats(rng, 19, 23), floats(rng, 23, 35), floats(rng, 35)], like(19, 35)
    ),
    "relu": Problem(lambda rng: [floats(rng, 1001)], like(1001)),
    "softmax_rows": Problem(lambda rng: [floats(rng, 7, 45)], like(7, 45)),
    "transpose_2d": Problem(lambda rng: [floats(rng, 37, 70)], like(70, 37)),
    "cumsum": Problem(lambda rng: [floats(rng, 5, 66)], like(5, 66)),
    "avg_pool2d": Problem(lambda rng: [floats(rng, 2, 3, 9, 9)], like(2, 3, 4, 4), (3.0, 2.0)),
    # stride 2, padding 1: the guards skip the border; oh = ow = 5
    "conv2d": Problem(
        lambda rng: [floats(rng, 2, 3, 9, 8), floats(rng, 4, 3, 3, 2), floats(rng, 4)],
        like(2, 4, 5, 5),
        (2.0, 1.0),
    ),
    # more keys than queries, neither a multiple of the GEMM's tile
    "attention": Problem(
        lambda rng: [
            floats(rng, 2, 1, 9, 13),
            floats(rng, 2, 1, 11, 13),
            floats(rng, 2, 1, 11, 13),
        ],
        like(2, 1, 9, 13),
    ),
    # past two of the widest tiles' columns and one slab of 128 keys: the masked GEMM leaves
    # out whole tiles and stops row blocks mid-slab
    "causal_attention": Problem(
        lambda rng: [floats(rng, 1, 2, 150, 13) for _ in range(3)], like(1, 2, 150, 13)
    ),
}
# attention's two lowerings and its heads on every core, as the offline policy makes them
ATTENTION_CHAIN = ["dots_by_gemm(kc=128, loop=L2)", "weighted_sums_by_gemm(kc=128, loop=L5)",
                   "omp_parallel_private(loop=L0)"]  # fmt: skip
CHAINS = {
    "attention": ATTENTION_CHAIN,
    "causal_attention": ATTENTION_CHAIN,
    "gemm": ["accumulate_in_output(loop=L1)", "hoist_invariant(loop=L2)", "omp_simd(loop=L3)",
             "omp_parallel_for(loop=L0, schedule=static)"],
    "transpose_2d": ["tile(loop=L0, size=16)", "omp_parallel_for(collapse=2, loop=L0, "
                     "schedule=static)", "unroll(factor=4, loop=L3)"],
}  # fmt: skip


def chained(operator: str) -> str:
    source = naive(operator)
    for label in CHAINS.get(operator, []):
        strategy = strategy_from_label(label)
        assert strategy in applicable(source), label
        source = apply(strategy, source)
    return source


def run_kernel(shared_object: Path, problem: Problem) -> list[np.ndarray]:
    inputs = problem.inputs(np.random.default_rng(7))
    outputs = problem.outputs(inputs)
    assert Call(load_kernel(str(shared_object)), inputs, outputs, list(problem.attrs))() == 0
    return outputs


@needs_gcc
@pytest.mark.parametrize("operator", sorted(PROBLEMS))
def test_legal_strategies_compute_the_same_numbers(operator: str, tmp_path: Path) -> None:
    problem = PROBLEMS[operator]
    variants = {"original": naive(operator)}
    variants |= {s.label(): apply(s, naive(operator)) for s in strategies_for(operator)
                 if s.name in LEGAL}  # fmt: skip
    if operator in CHAINS:
        variants[" then ".join(CHAINS[operator])] = chained(operator)

    def build(index_and_source: tuple[int, str]) -> Path:
        index, source = index_and_source
        result = compile_c(source, tmp_path / f"variant{index}", shared=True)
        assert result.returncode == 0, result.stderr
        return tmp_path / f"variant{index}.so"

    with ThreadPoolExecutor(max_workers=2) as pool:
        built = list(pool.map(build, enumerate(variants.values())))
    expected = run_kernel(built[0], problem)
    assert all(not np.isnan(array).any() for array in expected)
    for label, shared_object in zip(list(variants)[1:], built[1:], strict=True):
        for actual, wanted in zip(run_kernel(shared_object, problem), expected, strict=True):
            np.testing.assert_allclose(actual, wanted, rtol=1e-4, atol=1e-5, err_msg=label)
    assert len(variants) > 2  # every one of these kernels has legal strategies to try


@needs_gcc
def test_packed_gemm_of_transposed_operands_computes_the_same_numbers(tmp_path: Path) -> None:
    """k = 300 crosses two slab boundaries at kc = 128; m and n leave partial tiles."""
    m, n, k = 13, 37, 300
    problem = Problem(lambda rng: [floats(rng, k, m), floats(rng, n, k)], like(m, n))
    variants = [TRANSPOSED, apply(make("packed_gemm", loop="L0", kc=128), TRANSPOSED)]
    outputs = []
    for index, source in enumerate(variants):
        result = compile_c(source, tmp_path / f"transposed{index}", shared=True)
        assert result.returncode == 0, result.stderr
        outputs.append(run_kernel(tmp_path / f"transposed{index}.so", problem)[0])
    at, bt = problem.inputs(np.random.default_rng(7))
    np.testing.assert_allclose(outputs[0], 2.0 * (at.T @ bt.T), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-4, atol=1e-4)


@needs_gcc
@pytest.mark.parametrize(
    ("stride", "padding", "out"), [(1, 1, (9, 9)), (1, 0, (7, 7)), (3, 2, (4, 4))]
)
def test_im2col_gemm_fills_the_same_patches_at_unit_and_other_strides(
    stride: int, padding: int, out: tuple[int, int], tmp_path: Path
) -> None:
    """Stride 1 takes the fill written for it, any other the general one."""
    problem = Problem(
        lambda rng: [floats(rng, 2, 3, 9, 8), floats(rng, 4, 3, 3, 2), floats(rng, 4)],
        like(2, 4, *out),
        (float(stride), float(padding)),
    )
    lowered = apply(make("im2col_gemm", loop="L1", kc=128), naive("conv2d"))
    outputs = []
    for index, source in enumerate([naive("conv2d"), lowered]):
        result = compile_c(source, tmp_path / f"conv{index}", shared=True)
        assert result.returncode == 0, result.stderr
        outputs.append(run_kernel(tmp_path / f"conv{index}.so", problem)[0])
    assert not np.isnan(outputs[0]).any()
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-4, atol=1e-5)


TILES_DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
%s
/* Small integers: every sum is exact in float, so the product must match exactly. */
static int check(int m, int n, int k, int transposed, int kc) {
    float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n);
    float *c = malloc(sizeof(float) * m * n);
    for (int i = 0; i < m * k; ++i) a[i] = (float)(i * 7 %% 11) - 5.0f;
    for (int i = 0; i < k * n; ++i) b[i] = (float)(i * 3 %% 13) - 6.0f;
    /* B is (k, n) row-major, or its transpose (n, k) */
    int64_t b_row = transposed ? 1 : n, b_col = transposed ? k : 1;
    kope_packed_gemm(m, n, k, a, k, 1, b, b_row, b_col, c, n, kc);
    int wrong = 0;
    for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
            double want = 0.0;
            for (int p = 0; p < k; ++p) want += (double)a[i * k + p] * b[p * b_row + j * b_col];
            wrong += c[i * n + j] != (float)want;
        }
    }
    free(a);
    free(b);
    free(c);
    return wrong;
}
int main(void) {
    /* partial tiles of every size the tiles have (6 rows; 16 to 64 columns), several slabs */
    /* the last two: a matrix times a vector, and a few columns (dot products, not panels) */
    static const int shapes[][3] = {{1, 1, 1}, {5, 15, 7}, {7, 17, 129}, {13, 65, 300},
                                    {6, 64, 128}, {12, 130, 257}, {33, 1, 500}, {9, 3, 77}};
    int wrong = 0;
    for (int s = 0; s < 8; ++s) {
        for (int transposed = 0; transposed < 2; ++transposed) {
            wrong += check(shapes[s][0], shapes[s][1], shapes[s][2], transposed, 128);
        }
    }
    printf("%%d wrong\n", wrong);
    return wrong != 0;
}
"""


@needs_gcc
@pytest.mark.parametrize("arch", ["native", "x86-64-v3", "x86-64-v2"])
def test_packed_gemm_tiles_compute_exact_products_on_every_vector_width(
    arch: str, tmp_path: Path
) -> None:
    """The AVX-512 tile (native here), AVX2's (the profiling builds' x86-64-v3) and the
    generic vectors' compute the same exact sums, across partial tiles and slabs."""
    run = gemm_driver_run(TILES_DRIVER, tmp_path, arch=arch)
    assert run.stdout == "0 wrong\n" and run.returncode == 0, run.stdout


def gemm_driver_run(
    driver: str, tmp_path: Path, arch: str = "native"
) -> subprocess.CompletedProcess[str]:
    """`driver` with the packed GEMM's helper in place of its %s, built for `arch` and run."""
    from apps.agents.offline.packed_gemm import HELPER_SOURCE

    (tmp_path / "driver.c").write_text(driver % HELPER_SOURCE)
    flags = [f if not f.startswith("-march=") else f"-march={arch}" for f in FLAGS[:-1]]
    build = subprocess.run(
        ["gcc", *flags, *STRICT, "driver.c", "-o", "driver"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    return subprocess.run(["./driver"], cwd=tmp_path, capture_output=True, text=True, timeout=60)


MASKED_DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
%s
#define UNTOUCHED -12345.0f
/* Small integers, so every sum is exact. With KOPE_A_LOWER a is 0 past its diagonal; with
 * KOPE_C_LOWER the tiles wholly right of the diagonal must still hold UNTOUCHED and every
 * other element the exact sum. */
static int check(int m, int n, int k, int lower, int a_transposed, int kc, int *left_out) {
    float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n);
    float *c = malloc(sizeof(float) * m * n);
    int64_t a_row = a_transposed ? 1 : k, a_col = a_transposed ? m : 1;
    for (int i = 0; i < m; ++i) {
        for (int p = 0; p < k; ++p) {
            int zero = lower == KOPE_A_LOWER && p > i;
            a[i * a_row + p * a_col] = zero ? 0.0f : (float)((i * k + p) * 7 %% 11) - 5.0f;
        }
    }
    for (int i = 0; i < k * n; ++i) b[i] = (float)(i * 3 %% 13) - 6.0f;
    for (int i = 0; i < m * n; ++i) c[i] = UNTOUCHED;
    kope_masked_gemm(m, n, k, a, a_row, a_col, b, n, 1, c, n, kc, lower);
    int wrong = 0;
    for (int i = 0; i < m; ++i) {
        int last_row = (i / KOPE_MR + 1) * KOPE_MR < m ? (i / KOPE_MR + 1) * KOPE_MR - 1 : m - 1;
        for (int j = 0; j < n; ++j) {
            double want = 0.0;
            for (int p = 0; p < k; ++p) want += (double)a[i * a_row + p * a_col] * b[p * n + j];
            int out = lower == KOPE_C_LOWER && (j / KOPE_NR) * KOPE_NR > last_row;
            *left_out += out;
            wrong += c[i * n + j] != (out ? UNTOUCHED : (float)want);
        }
    }
    free(a);
    free(b);
    free(c);
    return wrong;
}
int main(void) {
    /* partial tiles, several slabs, row blocks that end mid-slab, more columns than rows */
    static const int shapes[][3] = {{1, 1, 1}, {5, 15, 7}, {13, 65, 300}, {70, 130, 129},
                                    {150, 150, 13}, {150, 13, 150}, {200, 64, 200}};
    int wrong = 0, left_out = 0;
    for (int s = 0; s < 7; ++s) {
        for (int lower = KOPE_FULL; lower <= KOPE_A_LOWER; ++lower) {
            for (int a_transposed = 0; a_transposed < 2; ++a_transposed) {
                wrong += check(shapes[s][0], shapes[s][1], shapes[s][2], lower, a_transposed,
                               64, &left_out);
            }
        }
    }
    printf("%%d wrong, %%d left out\n", wrong, left_out);
    return wrong != 0;
}
"""


@needs_gcc
@pytest.mark.parametrize("arch", ["native", "x86-64-v3", "x86-64-v2"])
def test_masked_gemm_leaves_out_only_what_a_causal_mask_does_not_need(
    arch: str, tmp_path: Path
) -> None:
    """On every tile width: the scores' tiles right of the diagonal are not computed (they
    still hold what was there), every other element is the exact product, and a product whose
    a is zero past its diagonal is exact though each row block stops at its last row."""
    run = gemm_driver_run(MASKED_DRIVER, tmp_path, arch=arch)
    assert run.returncode == 0, run.stdout
    counts = re.fullmatch(r"0 wrong, (\d+) left out\n", run.stdout)
    assert counts is not None and int(counts[1]) > 0, run.stdout


NO_MEMORY_DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
static void *no_memory(size_t size) { (void)size; return NULL; }
#define malloc no_memory
%s
#undef malloc
int main(void) {
    enum { M = 7, N = 19, K = 300 };
    static float a[K * M], b[N * K], c[M * N];
    for (int i = 0; i < K * M; ++i) a[i] = (float)(i * 7 %% 11) - 5.0f;
    for (int i = 0; i < N * K; ++i) b[i] = (float)(i * 3 %% 13) - 6.0f;
    kope_packed_gemm(M, N, K, a, 1, M, b, 1, K, c, N, 128); /* both operands transposed */
    for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
            double want = 0.0;
            for (int p = 0; p < K; ++p) want += (double)a[p * M + i] * b[j * K + p];
            if (c[i * N + j] != (float)want) {
                printf("c[%%d][%%d] = %%g, not %%g\n", i, j, c[i * N + j], want);
                return 1;
            }
        }
    }
    printf("ok %%g\n", c[M * N - 1]);
    return 0;
}
"""


@needs_gcc
def test_packed_gemm_without_memory_to_pack_computes_the_plain_loops(tmp_path: Path) -> None:
    """malloc is made to fail: the helper falls back to the plain product, never a wrong one
    (small integers, so every sum is exact in float)."""
    run = gemm_driver_run(NO_MEMORY_DRIVER, tmp_path)
    assert run.returncode == 0, run.stdout
    assert run.stdout.startswith("ok ") and run.stdout != "ok 0\n"  # a sum that is not 0


IJP_GEMM = """#include "kope_kernel.h"
int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    const float *a = (const float *)inputs[0].data, *b = (const float *)inputs[1].data;
    float *c = (float *)outputs[0].data;
    int64_t m = inputs[0].shape[0], k = inputs[0].shape[1], n = inputs[1].shape[1];
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
            for (int64_t p = 0; p < k; ++p)
                c[i * n + j] += a[i * k + p] * b[p * n + j];
    return 0;
}
"""


def test_the_stride_gain_of_an_interchange_counts_arrays_walked_element_by_element() -> None:
    """i-j-p walks a alone along p; i-p-j walks b and c along j. Attention's sum over values
    walks acc and v along e; turned to run over keys, it walks p alone."""
    assert interchange_stride_gain(IJP_GEMM, "L1") == 1
    assert interchange_stride_gain(apply(make("interchange", loop="L1"), IJP_GEMM), "L1") == -1
    assert interchange_stride_gain(naive("causal_attention"), "L6") == -1
    assert interchange_stride_gain(naive("transpose_2d"), "L0") == 0
    assert interchange_stride_gain(naive("gemm"), "L0") == -2  # C written down its columns
    assert interchange_stride_gain(IJP_GEMM, "L2") is None  # no loop inside it
    assert interchange_stride_gain(IJP_GEMM, "L9") is None
    assert interchange_stride_gain("not C at all {", "L0") is None


def test_an_interchange_that_only_reorders_whole_tiles_is_told_apart() -> None:
    """A tiled transpose's block loops (L0, L1) bound the element loops and appear in no
    subscript; its element loops (L2, L3), and a naive kernel's loops, are read by them."""
    tiled = apply(make("tile", loop="L0", size=32), naive("transpose_2d"))
    assert interchange_reorders_tiles(tiled, "L0")
    assert not interchange_reorders_tiles(tiled, "L1")  # jj around i: i is read
    assert not interchange_reorders_tiles(tiled, "L2")
    flagged = [(operator, info.id) for operator in OPERATORS for info in loops(naive(operator))
               if interchange_reorders_tiles(naive(operator), info.id)]  # fmt: skip
    assert flagged == []


def test_a_tile_of_a_tiles_element_loop_is_told_apart() -> None:
    """A tiled transpose's element loops (L2, L3) are bounded by its block loops; the block
    loops themselves, and every naive kernel's loops, are not."""
    tiled = apply(make("tile", loop="L0", size=32), naive("transpose_2d"))
    assert tile_splits_a_tile(tiled, "L2") and tile_splits_a_tile(tiled, "L3")
    assert not tile_splits_a_tile(tiled, "L0") and not tile_splits_a_tile(tiled, "L1")
    flagged = [(operator, info.id) for operator in OPERATORS for info in loops(naive(operator))
               if tile_splits_a_tile(naive(operator), info.id)]  # fmt: skip
    assert flagged == []


def test_a_tile_of_a_nest_that_walks_memory_in_order_is_told_apart() -> None:
    """A transpose writes down a column in its inner loop; attention's sum over values and
    average pooling's window walk every array in order, or not at all, there."""
    assert not tile_walks_in_order(naive("transpose_2d"), "L0")
    assert tile_walks_in_order(naive("attention"), "L6")
    assert tile_walks_in_order(naive("avg_pool2d"), "L3")
    assert not tile_walks_in_order(naive("avg_pool2d"), "L1")  # its child is not innermost
    assert not tile_walks_in_order("not C at all {", "L0")


def test_a_tile_that_reads_nothing_twice_is_told_apart() -> None:
    """A GEMM reads a row of A again for every column j; a transpose reads along i while it
    writes down a column in j; average pooling reads each window once, in both tiled loops."""
    assert not tile_finds_no_reuse(naive("gemm"), "L0")
    assert not tile_finds_no_reuse(naive("transpose_2d"), "L0")
    assert not tile_finds_no_reuse(naive("attention"), "L6")  # acc[e] again for every key
    assert tile_finds_no_reuse(naive("avg_pool2d"), "L1")
    assert not tile_finds_no_reuse(naive("avg_pool2d"), "L9")
    assert not tile_finds_no_reuse("not C at all {", "L0")


def test_an_interchange_of_a_window_that_walks_rows_is_told_apart() -> None:
    """Average pooling reads x[(i*s + p) * w + (j*s + q)]: q steps one element, p a row."""
    assert interchange_stride_gain(naive("avg_pool2d"), "L3") == -1
