"""A rule's wording as a kernel engineer would write it, from plain values (no ORM): when it
applies, what to do in words, the effect measured where it was adopted, and when not to.

Memory sits below the agents, so it cannot read their transform catalogue; the strategy
labels it words (`omp_parallel_for(loop=L1, schedule=static)`, `flags(set=fast_math)`,
`replay(case=12): a; b`) are parsed here, and a strategy not listed is worded by its label.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

REPLAY = "replay"
STEP_SEPARATOR = "; "
LABEL_CHARS = 300
FAILURES_LISTED = 5

FLAG_WORDS = {
    "unroll_loops": "-funroll-loops",
    "fast_math": "-ffast-math (changes floating-point results)",
    "fp_contract": "-ffp-contract=fast (fused multiply-adds)",
}


@dataclass(frozen=True)
class Label:
    name: str
    params: dict[str, str]


def parse_label(label: str) -> Label:
    """`name(a=1, b=x)` -> Label("name", {"a": "1", "b": "x"}); free text keeps its first line
    (cut to LABEL_CHARS) as its name, without parameters."""
    line = label.strip().splitlines()[0] if label.strip() else ""
    name, bracket, rest = line.partition("(")
    if not bracket or not name.strip().isidentifier():
        return Label(" ".join(line.split())[:LABEL_CHARS], {})
    inside = rest.rpartition(")")[0]
    pairs = (part.partition("=") for part in inside.split(",") if "=" in part)
    return Label(name.strip(), {key.strip(): value.strip() for key, _, value in pairs})


def steps_of(label: str) -> list[str]:
    """The strategies a label applied: a replay's steps, else the label itself."""
    first = label.strip().splitlines()[0] if label.strip() else ""
    if not first.startswith(f"{REPLAY}("):
        return [first]
    listed = first.partition("): ")[2]
    return [step.strip() for step in listed.split(STEP_SEPARATOR) if step.strip()]


def loop_words(loop: str) -> str:
    """Loop ids count the kernel's `for` statements in source order, so L0 is the outermost
    loop; the others are named by position (without the source, their depth is unknown)."""
    if loop == "L0":
        return "the outermost loop"
    if not (loop.startswith("L") and loop[1:].isdigit()):
        return "the loop"
    return f"loop {loop} (`for` number {int(loop[1:]) + 1} in the kernel)"


def _parallel(p: dict[str, str]) -> str:
    collapse = ", collapsing the two-loop nest" if p.get("collapse") == "2" else ""
    schedule = p.get("schedule", "static")
    loop = loop_words(p.get("loop", ""))
    return f"parallelize {loop} with OpenMP ({schedule} schedule{collapse})"


def _gemm(what: str) -> Callable[[dict[str, str]], str]:
    def words(p: dict[str, str]) -> str:
        slab = f" (k in slabs of {p['kc']})" if "kc" in p else ""
        loop = loop_words(p.get("loop", ""))
        return f"{what} at {loop} with the packed multi-threaded GEMM{slab}"

    return words


def flag_words(p: dict[str, str]) -> str:
    named = p.get("set", "?")
    return FLAG_WORDS.get(named, named)


STRATEGY_WORDS: dict[str, Callable[[dict[str, str]], str]] = {
    "omp_parallel_for": _parallel,
    "omp_parallel_private": lambda p: (
        f"parallelize {loop_words(p.get('loop', ''))} with OpenMP, each thread allocating its "
        "own scratch buffers"
    ),
    "omp_simd": lambda p: (
        f"vectorize {loop_words(p.get('loop', ''))} with `omp simd` (reorders floating-point sums)"
    ),
    "unroll": lambda p: f"unroll {loop_words(p.get('loop', ''))} by {p.get('factor', '4')}",
    "interchange": lambda p: (
        f"interchange {loop_words(p.get('loop', ''))} with the loop nested directly in it"
    ),
    "accumulate_in_output": lambda p: (
        f"accumulate straight into the output in i-p-j order at {loop_words(p.get('loop', ''))} "
        "(a vectorizable inner loop)"
    ),
    "tile": lambda p: (
        f"tile the two-loop nest at {loop_words(p.get('loop', ''))} into blocks of "
        f"{p.get('size', '32')}"
    ),
    "hoist_invariant": lambda p: (
        f"hoist loop-invariant index products out of {loop_words(p.get('loop', ''))} and multiply "
        "by the reciprocal of an invariant divisor (changes rounding)"
    ),
    "restrict_pointers": lambda p: "declare the input and output pointers `restrict`",
    "vector_math": lambda p: (
        "call glibc's vector math library for expf/logf/erff and the like in loops "
        "(`omp declare simd`, -fno-math-errno)"
    ),
    "float_accumulator": lambda p: (
        f"accumulate in float instead of double in {loop_words(p.get('loop', ''))} (less precise)"
    ),
    "packed_gemm": _gemm("replace the matrix-product nest"),
    "im2col_gemm": _gemm("lower the convolution (im2col)"),
    "dots_by_gemm": _gemm("compute the row loop's dot products first"),
    "weighted_sums_by_gemm": _gemm("compute the row loop's weighted sums"),
    "keep_buffers": lambda p: (
        "keep temporary buffers from one call to the next instead of allocating them on every call"
    ),
    "threads": lambda p: f"run on {p.get('n', 'more')} threads",
    "flags": lambda p: f"compile with {flag_words(p)}",
    "drop_flags": lambda p: f"drop {flag_words(p)} that a replayed path brought in",
}


def step_words(step: str) -> str:
    label = parse_label(step)
    words = STRATEGY_WORDS.get(label.name)
    return words(label.params) if words else label.name


def strategy_words(strategy: str) -> str:
    """What to do, in words: `omp_parallel_for(loop=L0, schedule=static)` -> "parallelize the
    outermost loop with OpenMP (static schedule)"; a replay's steps in order."""
    steps = [step_words(step) for step in steps_of(strategy)]
    if len(steps) == 1:
        return steps[0]
    return "apply in order: " + "; then ".join(steps)


def strategy_key(strategy: str) -> str:
    """A strategy normalized: each step's name, lowercased, with its parameters other than the
    loop, sorted (loop ids are positions in one kernel: L1 of a matmul and L1 of a convolution
    are different loops, while a tile of 32 at either is the same idea). A free-text strategy
    keeps its first line, lowercased, spaces collapsed."""
    parts = []
    for step in steps_of(strategy):
        label = parse_label(step)
        params = ",".join(f"{k}={v}" for k, v in sorted(label.params.items()) if k != "loop")
        parts.append(f"{label.name.lower()}({params})" if params else label.name.lower())
    return "; ".join(parts)


def claim_of(strategy: str, *, family: str, target: str) -> str:
    """What a rule says, normalized, so that two rules saying the same have one claim: the
    target and operator family it applies to, and the strategy_key of what to do. Shape class
    and dtype are left out: a strategy that paid on large float32 matmuls and on medium ones is
    one rule whose evidence lists both."""
    return f"{target}/{family or '-'}: {strategy_key(strategy)}"


def effect_words(speedups: Sequence[float]) -> str:
    """`median 1.90x (1.40x-2.60x) over 4 adoptions`, from the speedups vs parent measured
    where the experience was adopted and the kernel improved."""
    if not speedups:
        return "no improving adoption measured"
    low, high = min(speedups), max(speedups)
    spread = f" ({low:.2f}x-{high:.2f}x)" if len(speedups) > 1 else ""
    plural = "s" if len(speedups) != 1 else ""
    median = statistics.median(speedups)
    return f"median {median:.2f}x{spread} over {len(speedups)} adoption{plural}"


@dataclass(frozen=True)
class Failure:
    case_id: int
    operator: str
    outcome: str  # "incorrect", "regressed", ...
    speedup_vs_parent: float | None = None


def failure_words(failure: Failure) -> str:
    if failure.outcome == "regressed":
        slower = f" ({failure.speedup_vs_parent:.2f}x)" if failure.speedup_vs_parent else ""
        return f"slowed {failure.operator} down{slower} (case {failure.case_id})"
    return f"broke correctness on {failure.operator}: {failure.outcome} (case {failure.case_id})"


def not_when_words(failures: Sequence[Failure]) -> str:
    if not failures:
        return "no failure of this strategy is on record yet"
    listed = "; ".join(failure_words(f) for f in failures[:FAILURES_LISTED])
    unlisted = len(failures) - FAILURES_LISTED
    more = f"; and {unlisted} more" if unlisted > 0 else ""
    return f"it {listed}{more}"


@dataclass(frozen=True)
class Applicability:
    family: str
    shape_class: str
    dtype: str
    target: str
    profile: str = ""  # what the source case's profile or diagnostics showed, if any


def applies_words(where: Applicability, operators: Sequence[str]) -> str:
    kind = " ".join(part for part in (where.shape_class, where.dtype) if part)
    family = f"{where.family} operators" if where.family else "operators"
    text = f"{family}{f' ({kind})' if kind else ''} on {where.target or 'this target'}"
    if where.profile:
        text += f", where the profile showed: {where.profile}"
    if operators:
        text += f"; improved {', '.join(operators)}"
    return text


def statement_words(strategy: str, speedups: Sequence[float]) -> str:
    """Do what, then the expected effect: "Parallelize the outermost loop with OpenMP (static
    schedule). Expected speedup vs parent: median 1.90x (1.40x-2.60x) over 4 adoptions."."""
    what = strategy_words(strategy)
    return f"{what[:1].upper()}{what[1:]}. Expected speedup vs parent: {effect_words(speedups)}."
