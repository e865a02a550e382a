"""What the offline search policy could do to the incumbent: every source transformation that
applies, another thread count, another allowed flag set, or a flag set a replayed path brought
in taken out again; less the flag sets that broke the operator. And what a move's label names
(its strategy, the kind of move it is, its parameters), which memory's evidence and the
replays read too.
"""

from __future__ import annotations

import os

from apps.agents.offline.features import kernel_features
from apps.agents.offline.replay import (
    DROP_FLAGS,
    head_of,
    is_replay,
    lineage_of,
    steps_of,
)
from apps.agents.offline.transforms import (
    DECLARE_SIMD,
    TransformError,
    applicable,
    apply,
    strategy_from_label,
)
from apps.agents.policy import Candidate, Situation, Tools

# -ffast-math includes -ffp-contract=fast: after it, that set compiles to the same binary.
IMPLIED_BY = {"-ffast-math": ("-ffp-contract=fast",)}
NO_MATH_ERRNO = "-fno-math-errno"  # which -ffast-math includes
FLAG_SETS: dict[str, tuple[str, ...]] = {
    "unroll_loops": ("-funroll-loops",),
    "fast_math": ("-ffast-math",),
    "fp_contract": ("-ffp-contract=fast",),
}


# --- what it could do ------------------------------------------------------------------------


def moves(situation: Situation, tools: Tools) -> list[Candidate]:
    assert situation.incumbent is not None
    base = situation.incumbent.candidate
    candidates = source_moves(base)
    candidates += thread_moves(base)
    candidates += flag_moves(base, fast_math_allowed=situation.operator.fast_math_allowed)
    candidates += drop_moves(base, replayed_flag_sets(situation.incumbent.case_id, tools))
    # A flag set that broke this operator once breaks it again on any kernel derived from
    # that one: its tolerance is the operator's, not the kernel's.
    broken = broken_flag_sets(situation)
    return [c for c in candidates if c.strategy not in broken]


# Moves that leave every result bit for bit on a kernel where no loop reduces or carries a
# value: each output element is still computed by the same operations in the same order.
# hoist_invariant is not one: it turns a division into a product with a reciprocal.
EXACT_ON_MAPS = frozenset({"omp_parallel_for", "omp_parallel_private", "interchange", "tile",
                           "restrict_pointers", "unroll", "omp_simd", "threads",
                           "flags(set=unroll_loops)", "keep_buffers"})  # fmt: skip


def culprits(replay: str, source: str) -> list[str]:
    """The steps of a replayed path that broke `source` that may have broken it: on an
    elementwise map, its one step that can change a result where there is one (every other
    step computes each element as before), else all of them. On sigmoid, gelu's path
    (-ffast-math, the parallel loop, -funroll-loops) came out incorrect; blamed too, the
    parallel loop gave way to its dynamic schedule (7x slower)."""
    steps = steps_of(replay)
    if kernel_features(source) & {"reduction", "carried"}:
        return steps
    suspects = [step for step in steps if move_of(step) not in EXACT_ON_MAPS]
    return suspects if len(suspects) == 1 else steps


def broken_flag_sets(situation: Situation) -> frozenset[str]:
    """The flag sets that broke this operator, on their own or as the one culprit of a
    replayed path: they are not offered again. On sigmoid, two rounds after gelu's path broke it,
    -ffast-math alone broke a kernel vector_math had made faster, and no round was left for
    the parallel loop."""
    assert situation.incumbent is not None
    source = situation.incumbent.candidate.source
    blamed = (culprits(label, source) if is_replay(label) else [label]
              for label in situation.broke)  # fmt: skip
    return frozenset(steps[0] for steps in blamed
                     if len(steps) == 1 and steps[0].startswith("flags("))  # fmt: skip


def source_moves(base: Candidate) -> list[Candidate]:
    try:
        strategies = applicable(base.source)
    except TransformError:
        return []  # a kernel the parser cannot read: only threads and flags are left
    moves = []
    for strategy in strategies:
        if strategy.name == "vector_math" and "-ffast-math" in base.flags:
            continue  # math.h declares the vector versions under -ffast-math: the same binary
        try:
            source = apply(strategy, base.source)
        except TransformError:
            continue
        moves.append(source_move(source, strategy.label(), base))
    return moves


def source_move(source: str, label: str, base: Candidate) -> Candidate:
    return Candidate(source, label, flags_for(source, base), threads_for(source, base))


def threads_for(source: str, base: Candidate) -> int:
    """A parallel region only pays with more than one thread, so the first one brings them: on
    its own, neither step would ever look like an improvement to a hill climber."""
    if base.threads == 1 and "omp parallel" in source and "omp parallel" not in base.source:
        return os.cpu_count() or 1
    return base.threads


def flags_for(source: str, base: Candidate) -> tuple[str, ...]:
    """gcc only calls a function declared `omp declare simd` on vectors when it need not set
    errno, so the move that declares the first brings -fno-math-errno (as a parallel region
    brings threads). It changes no result: kernels never read errno."""
    has_it = bool({NO_MATH_ERRNO, "-ffast-math"} & set(base.flags))
    if has_it or DECLARE_SIMD not in source or DECLARE_SIMD in base.source:
        return base.flags
    return tuple(sorted({*base.flags, NO_MATH_ERRNO}))


def thread_moves(base: Candidate) -> list[Candidate]:
    """Another thread count, for a kernel that has a parallel region to use them."""
    if "omp parallel" not in base.source:
        return []
    cores = os.cpu_count() or 1
    counts = sorted({2, cores} - {base.threads, 1}) if cores > 1 else []
    return [Candidate(base.source, f"threads(n={n})", base.flags, n) for n in counts]


def flag_moves(base: Candidate, *, fast_math_allowed: bool) -> list[Candidate]:
    moves = []
    for name, flags in FLAG_SETS.items():
        if name == "fast_math" and not fast_math_allowed:
            continue
        if set(flags) <= set(base.flags) or any(f in IMPLIED_BY.get(g, ()) for f in flags
                                                for g in base.flags):  # fmt: skip
            continue
        merged = tuple(sorted({*base.flags, *flags}))
        moves.append(Candidate(base.source, f"flags(set={name})", merged, base.threads))
    return moves


def replayed_flag_sets(case_id: int, tools: Tools) -> set[str]:
    """The flag sets the incumbent took in with a replayed path: timed only together with the
    path's other steps, and found paying on another operator (row_sum's path brought
    -ffast-math to avg_pool2d, whose kernel it alone made 1.5x slower)."""
    case = tools.case(case_id)
    if case is None:
        return set()
    return {label_params(step)["set"] for ancestor in lineage_of(case, tools.tree(case))
            if is_replay(ancestor.strategy)
            for step in steps_of(ancestor.strategy) if step.startswith("flags(set=")}  # fmt: skip


def drop_moves(base: Candidate, names: set[str]) -> list[Candidate]:
    """The incumbent without each of the flag sets `names` that it still has."""
    moves = []
    for name in sorted(names):
        flags = FLAG_SETS.get(name, ())
        if flags and set(flags) <= set(base.flags):
            kept = tuple(flag for flag in base.flags if flag not in flags)
            moves.append(Candidate(base.source, f"{DROP_FLAGS}(set={name})", kept, base.threads))
    return moves


# --- what a label names ----------------------------------------------------------------------


def strategy_name(label: str) -> str:
    try:
        return strategy_from_label(label.strip().splitlines()[0]).name
    except (TransformError, IndexError):
        return label.split("(", 1)[0].strip()


# Strategies whose parameter makes a different move, not a variant of one: what -ffast-math
# did for gelu's expf says nothing about -funroll-loops, while a tile of 32 or of 64 is the
# same idea.
KIND_PARAMS = {"flags": "set", DROP_FLAGS: "set"}
FLAG_MOVES = frozenset(KIND_PARAMS)


def move_of(label: str) -> str:
    """What a case's evidence speaks for: the strategy's name, or `flags(set=fast_math)`."""
    name = strategy_name(label)
    kind = label_params(first_line(label)).get(KIND_PARAMS.get(name, ""), "")
    return f"{name}({KIND_PARAMS[name]}={kind})" if kind else name


def first_line(text: str) -> str:
    """The strategy a label names, without the steps a replay lists."""
    lines = text.strip().splitlines()
    return head_of(lines[0]) if lines else ""


def label_params(label: str) -> dict[str, str]:
    """`name(a=1, b=x)` -> {"a": "1", "b": "x"}: the parameters of any strategy label."""
    inside = label.partition("(")[2].rpartition(")")[0]
    pairs = (part.partition("=") for part in inside.split(",") if "=" in part)
    return {key.strip(): value.strip() for key, _, value in pairs}
