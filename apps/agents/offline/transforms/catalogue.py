"""The strategies by name: what each does (`SOURCE_STRATEGIES`), the parameters each takes
and the values tried, and a strategy with concrete parameters (`Strategy`, `strategy_from_label`)
with the loops it names (`LoopInfo`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apps.agents.offline.cparse import TransformError

SOURCE_STRATEGIES: dict[str, str] = {
    "omp_parallel_for": (
        "Run a loop's iterations on all cores: `#pragma omp parallel for schedule(...)`, with "
        "reduction clauses for its accumulators and optionally collapse(2) over a perfect nest."
    ),
    "omp_parallel_private": (
        "Run a loop's iterations on all cores when it uses scratch buffers (`T *b = "
        "malloc(...)` before it): a parallel region allocates them once per thread, then "
        "`#pragma omp for schedule(static)` shares out the iterations (a thread without "
        "memory makes the kernel return 1)."
    ),
    "omp_simd": (
        "Ask gcc to vectorise an innermost loop: `#pragma omp simd`, with reduction clauses for "
        "its accumulators (this reorders floating-point sums)."
    ),
    "unroll": "Unroll an innermost loop by 2, 4 or 8: `#pragma GCC unroll N`.",
    "interchange": "Swap a loop with its perfectly nested child loop (exchange their headers).",
    "accumulate_in_output": (
        "Turn `for j { acc = 0; for p acc += ...; out[..j..] = acc; }` into zeroing the outputs "
        "and `for p { for j out[..j..] += ...; }` (i-p-j matmul order, vectorisable; the sum is "
        "kept in the output's type)."
    ),
    "tile": "Tile a perfect two-loop nest into blocks of 16, 32 or 64 (four loops).",
    "hoist_invariant": (
        "Compute loop-invariant index products once before a loop, and replace divisions by a "
        "loop-invariant value with multiplication by its reciprocal (this changes rounding)."
    ),
    "restrict_pointers": "Declare the input and output data pointers `restrict` (no aliasing).",
    "vector_math": (
        "Let gcc call glibc's vector math library (libmvec) in loops: the math functions the "
        "loops call (expf, logf, erff, tanhf, powf, sinf, cosf and their double versions) "
        "declared `#pragma omp declare simd notinbranch`, built with -fno-math-errno. Unlike "
        "-ffast-math it keeps infinities and NaN, and the sums' order."
    ),
    "float_accumulator": (
        "Make a loop's double accumulators float (faster, vectorises better, less precise)."
    ),
    "packed_gemm": (
        "Replace a matrix-product nest `for i { for j { acc = 0; for p acc += A[i,p] * "
        "B[p,j]; ...acc... } }` (float operands, any strides) by a call to a packed, "
        "register-tiled, multi-threaded GEMM (k in slabs of kc: 128, 256 or 512); what the "
        "nest did with each sum (bias, activation, a store) stays a loop over the results."
    ),
    "im2col_gemm": (
        "Lower a windowed reduction (a convolution: `for o { for i { acc = init; for ch { "
        "guards; for p { acc += X[..i..p..] * W[..o..p..]; } } ... } }`) to one GEMM: the "
        "window's values copied into a patch row per output column (zero where a guard "
        "skips), W packed one row per o, the packed GEMM of the two (kc: 128, 256 or 512), "
        "then what the nest did with each sum, over the results."
    ),
    "dots_by_gemm": (
        "Compute a row loop's dot products first, as one GEMM: `for i { ...; for j { acc = 0; "
        "for p acc += A[i,p] * B[p,j]; ...acc... } ... }` (attention's scores; j up to a "
        "fixed bound, or to i inclusive) becomes the packed GEMM of all rows i and columns j "
        "into a buffer (kc: 128, 256 or 512), then the row loop reading each sum from it."
    ),
    "keep_buffers": (
        "Keep the kernel's temporary buffers from one call to the next: each `p = malloc(n)` "
        "(or kope_alloc) whose pointer the kernel frees gets a buffer per allocation site, "
        "grown when a call needs more and never freed, so a large temporary is not fresh "
        "pages, faulted in, on every call."
    ),
    "weighted_sums_by_gemm": (
        "Compute a row loop's weighted sums of a matrix's rows as one GEMM: `for i { ...; for "
        "e acc[e] = 0; for j { for e acc[e] += w[j] * V[j,e]; } ...acc[e]... }` (attention's "
        "probabilities times values; j up to a fixed bound, or to i inclusive) becomes the "
        "row loop up to the sums with each row's weights kept, the packed GEMM of all rows' "
        "weights and V (kc: 128, 256 or 512), then the rest of the row loop reading the sums."
    ),
}


SCHEDULES = ("static", "dynamic")
COLLAPSES = (1, 2)
UNROLL_FACTORS = (2, 4, 8)
TILE_SIZES = (16, 32, 64)
GEMM_K_SLABS = (128, 256, 512)


_PARAMETERS: dict[str, tuple[str, ...]] = {
    "omp_parallel_for": ("collapse", "loop", "schedule"),
    "omp_parallel_private": ("loop",),
    "omp_simd": ("loop",),
    "unroll": ("factor", "loop"),
    "interchange": ("loop",),
    "accumulate_in_output": ("loop",),
    "tile": ("loop", "size"),
    "hoist_invariant": ("loop",),
    "restrict_pointers": (),
    "vector_math": (),
    "float_accumulator": ("loop",),
    "packed_gemm": ("kc", "loop"),
    "im2col_gemm": ("kc", "loop"),
    "dots_by_gemm": ("kc", "loop"),
    "weighted_sums_by_gemm": ("kc", "loop"),
    "keep_buffers": (),
}


@dataclass(frozen=True)
class LoopInfo:
    """One `for` statement of `kope_kernel`, as the strategies see it."""

    id: str  # "L0", "L1", ... in source order of the `for` statements: positional
    line: int  # 1-based line of the `for`
    var: str | None  # the induction variable of `for (T v = a; v < b; ++v / v++ / v += c)`,
    # c a positive integer literal (OpenMP's canonical form, which tiled block loops have)
    depth: int  # 0 = outermost for in the function
    parent: str | None  # the enclosing for's id
    children: list[str]  # directly nested for ids
    perfect_child: str | None  # the inner for when the body is exactly that one loop
    reductions: list[tuple[str, str]]  # (variable, "+" | "-" | "*" | "max" | "min")
    carried: bool  # best effort: reads a scalar it writes (not as a reduction), or writes an
    # array element at an index not derived from the loop variable
    has_pragma: bool  # already preceded by a `#pragma omp` line


@dataclass(frozen=True)
class Strategy:
    """A named transformation with concrete parameters, e.g. `tile(loop=L0, size=32)`.
    Parameters are kept sorted by key, so equal strategies compare and hash equal."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(sorted(self.params, key=lambda kv: kv[0])))

    @classmethod
    def make(cls, name: str, **params: Any) -> Strategy:
        return cls(name, tuple(params.items()))

    def label(self) -> str:
        return f"{self.name}({', '.join(f'{key}={value}' for key, value in self.params)})"

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)


def strategy_from_label(label: str) -> Strategy:
    """The strategy `label` names: the inverse of `Strategy.label()`."""
    name, opening, rest = label.strip().partition("(")
    if not opening or not rest.endswith(")") or name not in SOURCE_STRATEGIES:
        raise TransformError(f"not a strategy label: {label!r}")
    params: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest[:-1].split(","))):
        key, equals, value = (piece.strip() for piece in item.partition("="))
        if not equals or key not in _PARAMETERS[name] or key in params:
            raise TransformError(f"not a strategy label: {label!r} (parameter {item!r})")
        if not (value.isascii() and value.replace("_", "").isalnum()):
            raise TransformError(f"not a strategy label: {label!r} (value {value!r})")
        params[key] = int(value) if value.isdigit() else value
    return Strategy(name, tuple(params.items()))
