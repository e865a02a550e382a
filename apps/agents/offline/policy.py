"""The offline search policy: hill climbing over named source transformations, steered by
memory. No model, no network.

Each iteration it lists what it could do to the incumbent (every source transformation that
applies, another thread count, another allowed flag set), drops what it already tried on this
incumbent and any kernel this operator already ran (a loop interchanged back to its parent's
order), puts last the other parameters of a strategy already tried on the same loop, what
did not pay on this very source under other flags and what a compiler's cost model turns down
(an interchange or a tile that walks memory worse), puts first a lowering to the packed GEMM
that no retrieved case weighs against, and scores the rest: a fixed prior (what usually pays
on CPUs first, with the float-reordering flags after the parallel loop on kernels with no math
to vectorize) plus the evidence memory brought back. Each retrieved case speaks for the
strategy it tried (for flags, for the set it added), with its gain (ln of its speedup over its
parent; -1 when it broke correctness or did not compile),
weighted by how relevant it is: its retrieval similarity, times the overlap of the kernel
features (apps/agents/offline/features.py) of the kernel it changed and of the incumbent,
halved for another family of operator. Per strategy the evidence is the weighted mean gain,
shrunk toward 0 while the total weight is small (sum w*g / (1 + sum w)), so one distant case
cannot outvote the prior and many similar ones can. An approved rule in hot memory that names
the strategy adds a fixed bonus. It proposes the best, and states which retrieved items
decided that and why, exactly as an LLM policy declares adoption, so ATU and UGC learn from
it the same way.

On a starting kernel it can also replay a path memory brought back (apps/agents/offline/
replay.py): every step of a similar operator's path to its best kernel that applies here (a
step on a loop, on the loop that plays the same role here), as one candidate, scored by that
path's gain weighted like a case's evidence. A flag set that came in with a replayed path was
only timed together with the path's other steps, so taking it out again (`drop_flags`) is a
move of its own: after the float accumulator in the prior (last of all on a kernel that calls
the math library), higher the more memory says the flag set slowed similar kernels. A source
step can cost here too: a replayed kernel that gained far less than its path did where it was
found (or, no faster, did not replace the start) is made again with only its most promising
source step, then without each of its source steps in turn, then with each other one alone
(see ablation_moves). A replayed kernel that broke correctness blames each of its steps: on
the kernel it was made from, none of them is tried alone before the fresh moves. On an
elementwise map, where a parallel loop or a tile computes each element as before, its one step
that can change a result is blamed alone: a flag set so blamed is dropped for the operator as
one that broke it on its own is, and the replay's case speaks against that step elsewhere.

What an earlier session measured on this very kernel (the same operator version, target,
source, flags and threads) is the evaluator's own verdict, not a lesson from a similar one: a
kernel memory saw made from the incumbent adds the gain it measured then to the candidate that
makes it again, whole (a loser is not tried again before fresh moves), and on the starting
kernel the path the operator's own earlier tree took to its best kernel is replayed first. A
session that runs an operator again starts where the last one ended.
"""

from __future__ import annotations

import math
import os
import random
import statistics
from dataclasses import dataclass, replace

from apps.agents.offline.features import kernel_features, overlap, same_role_loop
from apps.agents.offline.replay import (
    DROP_FLAGS,
    REPLAY,
    Path,
    Step,
    case_of,
    fits,
    flags_dropped_by,
    head_of,
    is_replay,
    lineage_of,
    paths,
    replay_label,
    steps_of,
    tree_of,
)
from apps.agents.offline.transforms import (
    DECLARE_SIMD,
    Strategy,
    TransformError,
    applicable,
    apply,
    interchange_reorders_tiles,
    interchange_stride_gain,
    strategy_from_label,
    tile_finds_no_reuse,
    tile_splits_a_tile,
    tile_walks_in_order,
)
from apps.agents.policy import (
    FAILED_OUTCOMES,
    Candidate,
    KernelKey,
    Proposal,
    Situation,
    Tools,
    candidate_of_case,
)
from apps.memory.models import Case
from apps.memory.retrieval import Hit
from apps.memory.values import Distiller, summarizer

# A matrix product handed to the packed GEMM, a convolution lowered to one, a row loop's dot
# products (attention's scores) or weighted sums (its probabilities times values) computed by
# one: each applies only to such nests,
# nothing else comes near it there, and a replayed path that did not make the lowering does
# not stand in for it.
LOWERINGS = ("packed_gemm", "im2col_gemm", "dots_by_gemm", "weighted_sums_by_gemm")
# What tends to pay first on a CPU, best first: the lowerings, loop order and accumulation
# (they unlock vectorization), flags that let gcc vectorize math (or, where -ffast-math broke
# the kernel, the vector math library alone: vector_math), then threads (a loop that
# uses scratch buffers gets a copy per thread: made parallel as it is, it races on them), then
# the finer tools: a float accumulator (one per loop, each a round; attention has three, and
# spent its rounds on them before its threads), taking out a flag set a replayed path brought
# in, restrict, simd, hoisting, unrolling. Only a tie-breaker once memory speaks.
PRIOR_ORDER = (
    *LOWERINGS, "accumulate_in_output", "interchange", "tile",
    "flags(set=fast_math)", "vector_math", "flags(set=fp_contract)", "omp_parallel_private",
    "omp_parallel_for", "keep_buffers", "float_accumulator", DROP_FLAGS, "restrict_pointers",
    "omp_simd", "hoist_invariant", "unroll", "flags(set=unroll_loops)", "threads",
)  # fmt: skip
# The flags that let gcc reorder float arithmetic only pay where there is math to vectorize: a
# call to the math library or a float reduction. A streaming loop gcc -O3 vectorizes already;
# there the parallel loop comes first.
REORDERING_FLAGS = ("flags(set=fast_math)", "flags(set=fp_contract)")
MATH_CALLS = "math-calls"
TEMPORARIES = "temporaries"  # features.TEMPORARIES
KEEP_BUFFERS = "keep_buffers"
REORDERING_PAYS_ON = frozenset({MATH_CALLS, "reduction"})
PRIOR_WEIGHT = 0.3
RULE_BONUS = 0.5
FAILURE_GAIN = -1.0
OTHER_FAMILY_FACTOR = 0.5  # a lesson from another family of operator counts for less
MAX_GAIN = 2.0  # ln-speedup cap, so one lucky case does not drown the rest

# -ffast-math includes -ffp-contract=fast: after it, that set compiles to the same binary.
IMPLIED_BY = {"-ffast-math": ("-ffp-contract=fast",)}
NO_MATH_ERRNO = "-fno-math-errno"  # which -ffast-math includes
FLAG_SETS: dict[str, tuple[str, ...]] = {
    "unroll_loops": ("-funroll-loops",),
    "fast_math": ("-ffast-math",),
    "fp_contract": ("-ffp-contract=fast",),
}


@dataclass(frozen=True)
class Evidence:
    key: str
    move: str  # what it speaks for: a strategy's name, or a kind of it (see move_of)
    gain: float  # ln speedup over its parent; FAILURE_GAIN when it broke the kernel
    weight: float  # how much it applies here, 0..1
    why: str

    @property
    def says(self) -> float:
        return self.gain * self.weight


class OfflineSearchPolicy:
    name = "offline"

    def distiller(self) -> Distiller:
        return summarizer

    def propose(self, situation: Situation, tools: Tools) -> Proposal:
        if situation.incumbent is None:
            return Proposal(None, rationale=no_start_reason(situation))
        order = prior_order(kernel_features(situation.incumbent.candidate.source))
        ordinary = moves(situation)
        cases = retrieved_cases(situation.retrieved)
        measured = measured_from_here(situation, cases)
        replays = {r.candidate.strategy: r
                   for r in replay_moves(situation, ordinary, order, measured)}  # fmt: skip
        ablations = {a.candidate.strategy: a for a in ablation_moves(situation, order)}
        made = [*ordinary, *(r.candidate for r in replays.values()),
                *(a.candidate for a in ablations.values())]  # fmt: skip
        options = [c for c in made if c.strategy not in situation.tried
                   and c.kernel_key not in situation.evaluated]  # fmt: skip
        if not options:
            return Proposal(None, rationale="every strategy that applies to the incumbent "
                            "has been tried or makes a kernel already run")  # fmt: skip
        evidence = gather_evidence(situation, cases)
        worn = worn_moves(situation)
        blamed = blamed_steps(situation)
        source = situation.incumbent.candidate.source
        scored = sorted(options, reverse=True, key=lambda c: (
            not walks_memory_worse(c.strategy, source),
            (move_key(c.strategy) not in worn or c.strategy in ablations)
            and c.strategy not in situation.lost and c.strategy not in blamed,
            makes_a_lowering_memory_does_not_fault(c, evidence) and c.strategy not in ablations,
            takes_the_replay_apart(c.strategy, ablations),
            *score_key(c, evidence, situation.seed, order, replays, measured, ablations),
        ))  # fmt: skip
        chosen = scored[0]
        if chosen.strategy in replays:
            adopted = [{"key": replays[chosen.strategy].path.key,
                        "why": replays[chosen.strategy].why}]  # fmt: skip
        elif chosen.strategy in ablations:
            adopted = []
        else:
            adopted = adoption(chosen, scored, evidence, order)
        adopted += [{"key": e.key, "why": e.why}
                    for e in measured.get(chosen.kernel_key, []) if e.gain > 0]  # fmt: skip
        because = ablations[chosen.strategy].why if chosen.strategy in ablations else (
            "; ".join(a["why"] for a in adopted) if adopted else "next by the fixed prior"
        )  # fmt: skip
        rationale = f"{chosen.strategy}: {because}"
        return Proposal(chosen, adopted=adopted, rationale=rationale)


def makes_a_lowering_memory_does_not_fault(candidate: Candidate,
                                           evidence: list[Evidence]) -> bool:  # fmt: skip
    """Whether the candidate hands a nest to the packed GEMM (alone or in a replayed path) and
    no retrieved case weighs against that lowering. Such a candidate comes before anything that
    memory only says paid elsewhere: a lowering is worth tens of times where it applies, and
    avg_pool2d's 1.7x interchange kept conv2d from its im2col_gemm for four rounds."""
    lowerings = {move_of(step) for step in steps_of(candidate.strategy)} & set(LOWERINGS)
    return bool(lowerings) and all(evidence_for(move, evidence) >= 0 for move in lowerings)


def takes_the_replay_apart(label: str, ablations: dict[str, Ablation]) -> bool:
    """Whether, on a replayed kernel that gained far less than its path did, `label` is the
    first of its ablations or takes out a flag set the path brought: either comes before any
    fresh move on that kernel (their scores decide between them)."""
    if label in ablations:
        return ablations[label].first
    return bool(ablations) and strategy_name(label) == DROP_FLAGS


def walks_memory_worse(label: str, source: str) -> bool:
    """Whether a compiler's cost model would turn `label` down on `source`: an interchange that
    leaves the innermost loop walking fewer arrays element by element
    (transforms.interchange_stride_gain; attention's sum over values turned to run over keys
    made the kernel 2x slower, the first round of every attention session) or that only
    reorders whole tiles (transforms.interchange_reorders_tiles), or a tile of a
    nest that walks memory in order already (transforms.tile_walks_in_order; tiled, the same
    sum ran 1.2x slower) or that reads nothing twice (transforms.tile_finds_no_reuse;
    avg_pool2d's output rows, tiled, ran 2x slower), or a tile of a tile's element loop
    (transforms.tile_splits_a_tile). Such a move comes after everything else
    that applies, even the moves worn out here: the evaluator still decides, if rounds are
    left."""
    move, loop = move_key(label)
    if move == "interchange":
        gain = interchange_stride_gain(source, loop)
        return (gain is not None and gain < 0) or interchange_reorders_tiles(source, loop)
    return move == "tile" and (
        tile_walks_in_order(source, loop)
        or tile_finds_no_reuse(source, loop)
        or tile_splits_a_tile(source, loop)
    )


def worn_moves(situation: Situation) -> set[tuple[str, str]]:
    """The (move, loop) pairs already tried on the incumbent or lost on its very source: their
    other parameters (a tile of 64 after a tile of 32 did not pay, on the same loop) come after
    everything fresh."""
    return {move_key(label) for label in situation.tried | situation.lost}


def blamed_steps(situation: Situation) -> frozenset[str]:
    """The steps of the replays that broke the incumbent that may have broken it (see
    culprits): each tried alone may well break it again. They come after the moves nothing
    speaks against (sigmoid, after gelu's path with -ffast-math broke it, spent its next round
    on -ffast-math alone and had none left for the parallel loop)."""
    assert situation.incumbent is not None
    source = situation.incumbent.candidate.source
    failed = (label for label in situation.tried & situation.broke if is_replay(label))
    return frozenset(step for label in failed for step in culprits(label, source))


def move_key(label: str) -> tuple[str, str]:
    return move_of(label), label_params(first_line(label)).get("loop", "")


def no_start_reason(situation: Situation) -> str:
    if situation.latest is None:
        return (f"{situation.operator.slug} has no starting kernel for {situation.target} and "
                "none was uploaded: the offline policy only transforms an existing kernel. "
                "Upload one, or use the Claude policy, which writes one.")  # fmt: skip
    return ("the starting kernel is not correct and the offline policy cannot repair it "
            "(it only applies transformations to a correct kernel): fix it, or use the Claude "
            "policy")  # fmt: skip


# --- what it could do ------------------------------------------------------------------------


def moves(situation: Situation) -> list[Candidate]:
    assert situation.incumbent is not None
    base = situation.incumbent.candidate
    candidates = source_moves(base)
    candidates += thread_moves(base)
    candidates += flag_moves(base, fast_math_allowed=situation.operator.fast_math_allowed)
    candidates += drop_moves(base, replayed_flag_sets(situation.incumbent.case_id))
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


def replayed_flag_sets(case_id: int) -> set[str]:
    """The flag sets the incumbent took in with a replayed path: timed only together with the
    path's other steps, and found paying on another operator (row_sum's path brought
    -ffast-math to avg_pool2d, whose kernel it alone made 1.5x slower)."""
    case = Case.objects.filter(pk=case_id).first()
    if case is None:
        return set()
    return {label_params(step)["set"] for ancestor in lineage_of(case, tree_of(case))
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


# --- a path memory brought back ------------------------------------------------------------

# One step is an ordinary move, offered (and scored) as such; but the operator's own path from
# this very start counts at any length: a best kernel made again without a replay's other steps
# is a child of the replay, so no case made from this start says what it gained but its path.
MIN_REPLAY_STEPS = 2


@dataclass(frozen=True)
class Replay:
    """A retrieved path applied to the starting kernel as one candidate."""

    candidate: Candidate
    path: Path
    applied: tuple[Step, ...]  # the path's steps that applied here
    weight: float  # how much the path applies here, 0..1, as a case's evidence weighs
    prior: float  # the fixed prior of its best step here
    here: bool = False  # found from this very starting kernel: its gains were measured here

    @property
    def gained(self) -> float:
        """What the applied steps gained where they were found (ln speedup)."""
        return sum(step.gain for step in self.applied)

    @property
    def gain(self) -> float:
        """`gained`, capped like a case's evidence."""
        return min(MAX_GAIN, self.gained)

    @property
    def score(self) -> float:
        """As its best step would rank, plus the applied steps' gain: whole where they were
        measured on this very kernel, else shrunk like one case's evidence."""
        if self.here:
            return self.prior + self.gained
        return self.prior + self.gain * self.weight / (1.0 + self.weight)

    @property
    def why(self) -> str:
        if self.here:
            return (f"replayed the path an earlier session of {self.path.operator} took from "
                    f"this very kernel to its best (case:{self.path.best_case_id}, "
                    f"{self.path.speedup:.2f}x over this start there)")  # fmt: skip
        return (f"replayed the path of {self.path.operator}'s best kernel (case:"
                f"{self.path.best_case_id}, {self.path.speedup:.2f}x over its start; the "
                f"{len(self.applied)} steps that apply here gained {math.exp(self.gained):.2f}x "
                f"there; {self.weight:.0%} relevant here)")  # fmt: skip


def replay_moves(situation: Situation, options: list[Candidate], order: tuple[str, ...],
                 measured: Measured) -> list[Replay]:  # fmt: skip
    """Each retrieved path replayed on the starting kernel, where two or more of its steps
    apply and gained there (one, on the operator's own path from this very start, unless
    `measured` already holds the ordinary move that makes its kernel), and it makes every
    lowering among `options` that it could. Only from the start: the steps were found from a
    start, in order."""
    incumbent = situation.incumbent
    if incumbent is None or not situation.retrieved or not at_start(incumbent.case_id):
        return []
    here = kernel_features(incumbent.candidate.source)
    lowerings = {strategy_name(c.strategy) for c in options} & set(LOWERINGS)
    found = paths(situation.retrieved, session_id=situation.session_id,
                  version_id=situation.operator.version_id)  # fmt: skip
    replays = []
    for path in found:
        from_here = found_from_this_start(path, situation)
        made = replayed(path, incumbent.candidate, situation, 1 if from_here else MIN_REPLAY_STEPS)
        if made is None:
            continue
        candidate, applied = made
        if len(applied) < MIN_REPLAY_STEPS and candidate.kernel_key in measured:
            continue
        names = {strategy_name(step.label) for step in applied}
        family = 1.0 if path.family == situation.operator.family else OTHER_FAMILY_FACTOR
        weight = path.similarity * overlap(here, kernel_features(path.start_source)) * family
        best_prior = max(prior(move_of(step.label), order) for step in applied)
        replay = Replay(candidate, path, tuple(applied), 1.0 if from_here else weight, best_prior,
                        from_here)  # fmt: skip
        if weight > 0 and replay.gain > 0 and lowerings <= names:
            replays.append(replay)
    return replays


def found_from_this_start(path: Path, situation: Situation) -> bool:
    """Whether `path` was found from the very kernel the incumbent is: this operator version's
    starting kernel, on this target."""
    incumbent = situation.incumbent
    return (incumbent is not None and path.version_id == situation.operator.version_id
            and path.target == situation.target
            and path.start_source == incumbent.candidate.source)  # fmt: skip


def at_start(case_id: int) -> bool:
    return Case.objects.filter(pk=case_id, parent__isnull=True).exists()


def replayed(path: Path, base: Candidate, situation: Situation,
             min_steps: int) -> tuple[Candidate, list[Step]] | None:  # fmt: skip
    """`base` after every step of `path` that applies to it, in order, and those steps; None
    when fewer than `min_steps` did."""
    candidate, applied = base, list[Step]()
    there = path.start_source  # the kernel each step was applied to where it was found
    for step in path.steps:
        after = applied_here(step.label, candidate, there, situation)
        there = source_after(step.label, there)
        if after is None:
            continue
        made = Step(after.strategy, step.gain)  # the step as it applied here
        if fits(replay_label(path.best_case_id, [s.label for s in [*applied, made]])):
            candidate, applied = after, [*applied, made]
    if len(applied) < min_steps:
        return None
    label = replay_label(path.best_case_id, [s.label for s in applied])
    return replace(candidate, strategy=label), applied


# A replayed path that gained here less than this share of what it gained where it was found
# (in ln speedup) likely has a step that does not pay here.
UNDERDELIVERED_SHARE = 0.5


@dataclass(frozen=True)
class Ablation:
    """The replayed incumbent made again from the start with only some of the path's steps."""

    candidate: Candidate
    preference: float  # among ablations, the one to try first is the highest
    why: str
    # The strongest source step alone: it comes before any fresh move on the replayed kernel
    # (see takes_the_replay_apart). At the rank of drop_flags, a float accumulator came first
    # on avg_pool2d; on a kernel that -ffast-math made 2x slower it read 1.02x, replaced
    # the replay, and the session never came back to the parallel loop alone (1.2x with
    # memory, 1.9x without).
    first: bool = False


def ablation_moves(situation: Situation, order: tuple[str, ...]) -> list[Ablation]:
    """The incumbent, when it is a replayed path that gained here far less than where it was
    found, made again from the start: first, before any fresh move on the replayed kernel,
    with only the source step the prior expects most of, without the path's flags (the
    kernel a session without memory makes first, so a path that does not pay here costs one
    round, not one per step); then without each of its source steps in turn (a flag set it
    brought has drop_flags), the step the prior expects least of left out first; then each
    other source step alone. The steps were only timed
    together: replayed on avg_pool2d, row_sum's path (-ffast-math, the parallel loop, a float
    accumulator) made it 1.2x faster where the parallel loop alone made it 1.9x, and in a suite
    run the flags taken out, then each of the other two steps left out, took three rounds
    and found nothing."""
    incumbent = situation.incumbent
    incumbent_case = Case.objects.filter(pk=incumbent.case_id).first() if incumbent else None
    if incumbent_case is None:
        return []
    case = (incumbent_case if is_replay(incumbent_case.strategy)
            else replay_that_fell_short(incumbent_case))  # fmt: skip
    if case is None:
        return []
    start = lineage_of(case, tree_of(case))[0]
    if not underdelivered(case, start):
        return []
    steps = steps_of(case.strategy)
    sources = [i for i, step in enumerate(steps) if not sets_flags_or_threads(step)]
    base, followed = candidate_of_case(start), followed_case_id(case.strategy)
    strongest = max(sources, key=lambda i: prior(move_of(steps[i]), order), default=None)
    ablations = []
    for index in sources:
        step, all_but = steps[index], set(range(len(steps))) - {index}
        alone = 1.0 if index == strongest else -1.0 + prior(move_of(step), order)
        for kept, preference, why in (
            (all_but, -prior(move_of(step), order), f"the replayed path again without {step}"),
            ({index}, alone, f"{step} of the replayed path alone"),
        ):
            made = made_with(base, steps, kept, situation)
            if made is not None:
                label = replay_label(followed, [c.strategy for c in made])
                because = (f"{why}: it gained here well under half of what it gained where it "
                           "was found, and its steps were timed only together")  # fmt: skip
                ablations.append(Ablation(replace(made[-1], strategy=label), preference, because,
                                          first=kept == {strongest}))  # fmt: skip
    return ablations


def replay_that_fell_short(start: Case) -> Case | None:
    """The first replay this session made from `start`, a starting kernel that is still the
    incumbent, so one that came out correct but no faster: its steps were timed only together
    too (cross_entropy's path read 0.98x on avg_pool2d, whose parallel loop alone made it
    1.9x; -ffast-math, tried alone next, 0.55x). The first, because the ablations made from the
    start are replays too, and one that fell short in turn would leave no ablations of its
    own."""
    if start.parent_id is not None:
        return None
    replays = Case.objects.filter(parent=start, session_id=start.session_id, correct=True,
                                  strategy__startswith=f"{REPLAY}(")  # fmt: skip
    return replays.exclude(latency_ms=None).order_by("iteration").first()


def underdelivered(case: Case, start: Case) -> bool:
    """Whether a replayed kernel gained over its start less than UNDERDELIVERED_SHARE of what
    the path it followed gained over its own start."""
    followed = Case.objects.filter(pk=followed_case_id(case.strategy)).first()
    if followed is None or not (case.latency_ms and start.latency_ms and followed.latency_ms):
        return False
    origin = lineage_of(followed, tree_of(followed))[0]
    if not origin.latency_ms or origin.latency_ms <= followed.latency_ms:
        return False
    gained_here = math.log(start.latency_ms / case.latency_ms)
    return gained_here < UNDERDELIVERED_SHARE * math.log(origin.latency_ms / followed.latency_ms)


def followed_case_id(label: str) -> int:
    """N for `replay(case=N): ...`; 0 (no case) for a label that does not say."""
    case = label_params(head_of(label)).get("case", "")
    return int(case) if case.isdecimal() else 0


def made_with(base: Candidate, steps: list[str], kept: set[int],
              situation: Situation) -> list[Candidate] | None:  # fmt: skip
    """`base` after the `kept` steps of `steps` (by index), in order, each on the loop that
    plays the role it played in the full sequence (leaving a step out can renumber the loops);
    None when a step then no longer applies or none is kept."""
    made: list[Candidate] = []
    candidate, there = base, base.source
    for index, step in enumerate(steps):
        if index in kept:
            after = applied_here(step, candidate, there, situation)
            if after is None:
                return None
            candidate, made = after, [*made, after]
        there = source_after(step, there)
    return made or None


def applied_here(step: str, candidate: Candidate, there: str,
                 situation: Situation) -> Candidate | None:  # fmt: skip
    """`candidate` after a path's step that was applied to `there` where it was found, on the
    loop that plays the same role here; None when it does not apply here."""
    label_here = step_for(candidate.source, step, there)
    return step_applied(label_here, candidate, situation) if label_here else None


def sets_flags_or_threads(label: str) -> bool:
    """Whether a step sets flags or a thread count: it leaves the source as it is."""
    return label.startswith(("flags(", "threads("))


def step_for(here: str, label: str, there: str) -> str | None:
    """A path's step as it applies to `here`: on the loop that plays the role here that the
    step's loop played `there` (see features.same_role_loop); None when no loop here does. A
    step on no loop is the same step everywhere."""
    if sets_flags_or_threads(label):
        return label
    try:
        strategy = strategy_from_label(label)
    except TransformError:
        return None
    loop = strategy.param("loop")
    if loop is None:
        return label
    mapped = same_role_loop(loop, there, here)
    if mapped is None:
        return None
    return Strategy.make(strategy.name, **{**dict(strategy.params), "loop": mapped}).label()


def source_after(label: str, source: str) -> str:
    """`source` after one step of a path, as it was where the path was found; unchanged by a
    flag set, a thread count, or a step that no longer applies."""
    if sets_flags_or_threads(label):
        return source
    try:
        return apply(strategy_from_label(label), source)
    except TransformError:
        return source


def step_applied(step: str, base: Candidate, situation: Situation) -> Candidate | None:
    """`base` after one step of a path; None when the step does not apply to it or changes
    nothing (a flag set it has, a flag set that broke this operator, a loop it lacks)."""
    if sets_flags_or_threads(step):
        allowed = situation.operator.fast_math_allowed
        offered = thread_moves(base) + flag_moves(base, fast_math_allowed=allowed)
        broken = broken_flag_sets(situation)
        return next((c for c in offered if c.strategy == step and step not in broken), None)
    try:
        strategy = parallel_as_needed(strategy_from_label(step), base.source)
        source = apply(strategy, base.source)
    except TransformError:
        return None
    if source == base.source:
        return None
    return source_move(source, strategy.label(), base)


def parallel_as_needed(strategy: Strategy, source: str) -> Strategy:
    """A path's parallel loop, as this kernel needs it: where the loop uses scratch buffers
    (attention's row of scores), made parallel as it is it races on them (the prior puts
    omp_parallel_private first for that reason); the private region shares them out."""
    if strategy.name != "omp_parallel_for":
        return strategy
    private = Strategy.make("omp_parallel_private", loop=strategy.param("loop"))
    try:
        apply(private, source)
    except TransformError:
        return strategy
    return private


# --- what memory says ------------------------------------------------------------------------


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


def speaks_for(evidence_move: str, move: str) -> bool:
    """A lesson about a kind of strategy speaks for that kind; one about the strategy as a
    whole (an approved rule that says "flags") speaks for every kind of it."""
    return evidence_move in (move, move.split("(", 1)[0])


RetrievedCases = list[tuple[Hit, Case]]


def retrieved_cases(hits: list[Hit]) -> RetrievedCases:
    """The retrieved cases, each read once, with the hit that brought it."""
    return [(hit, case) for hit in hits if (case := case_of(hit)) is not None]


def gather_evidence(situation: Situation, cases: RetrievedCases) -> list[Evidence]:
    assert situation.incumbent is not None
    here = kernel_features(situation.incumbent.candidate.source)
    evidence = [e for hit, case in cases if (e := case_evidence(hit, case, situation, here))]
    for rule in situation.hot_rules:
        move = move_of(rule["statement"])
        evidence.append(Evidence(rule["key"], move, RULE_BONUS, 1.0,
                                 f"approved rule {rule['key']} recommends {move}"))  # fmt: skip
    return evidence


def case_evidence(hit: Hit, case: Case, situation: Situation,
                  here: frozenset[str]) -> Evidence | None:  # fmt: skip
    if case.parent is None or case.parent.source is None:
        return None  # a starting kernel says nothing about a strategy
    incumbent = situation.incumbent
    move = move_spoken_for(case)
    if (incumbent is not None and case.parent.source.text == incumbent.candidate.source
            and strategy_name(move) not in FLAG_MOVES):  # fmt: skip
        # Made from this very source: what a loop move did says nothing sure about the same
        # move on another loop of it (the inner loop's parallel region lost 7x on
        # gather_rows; the outer one's gained 1.8x). A flag set is the same move on any
        # flags, so its record here is the surest evidence there is.
        return None
    operator = case.version.operator
    family = 1.0 if operator.family == situation.operator.family else OTHER_FAMILY_FACTOR
    alike = overlap(here, kernel_features(case.parent.source.text))
    weight = max(0.0, hit.scores.get("similarity", 0.0)) * alike * family
    where = f"{hit.key} ({operator.slug}, a kernel {alike:.0%} alike)"
    if case.feedback.get("same_binary"):
        return Evidence(hit.key, move, 0.0, weight,
                        f"{where} compiled to its parent's very binary with {move}")  # fmt: skip
    gain = case_gain(case)
    if gain is None:
        return None
    if case.correct and case.speedup_vs_parent:
        verb = "improved" if gain > 0 else "slowed"
        return Evidence(hit.key, move, gain, weight,
                        f"{where} {verb} {case.speedup_vs_parent:.2f}x with {move}")  # fmt: skip
    after = move if move == move_of(case.strategy) else (
        f"a replayed path whose one step that can change a result was {move}")  # fmt: skip
    return Evidence(hit.key, move, gain, weight, f"{where} was {case.outcome} after {after}")


def move_spoken_for(case: Case) -> str:
    """What a case speaks for: its strategy, or for a replayed path that broke an elementwise
    map, its one step that can change a result (see culprits), as if it had broken the kernel
    alone. swiglu, after sigmoid's replay with -ffast-math broke sigmoid, spent a round on
    -ffast-math and broke the same way."""
    broken = case.parent.source if case.parent else None  # the kernel the path broke
    if is_replay(case.strategy) and case.outcome in FAILED_OUTCOMES and broken is not None:
        blamed = culprits(case.strategy, broken.text)
        if len(blamed) == 1:
            return move_of(blamed[0])
    return move_of(case.strategy)


def case_gain(case: Case) -> float | None:
    """What a case says of its strategy: ln of its speedup over its parent, capped at
    MAX_GAIN either way, or FAILURE_GAIN when it broke the kernel; None when it says nothing
    (not timed)."""
    if case.correct and case.speedup_vs_parent:
        return max(-MAX_GAIN, min(MAX_GAIN, math.log(case.speedup_vs_parent)))
    if case.outcome in FAILED_OUTCOMES:
        return FAILURE_GAIN
    return None


def measured_from_here(situation: Situation, cases: RetrievedCases) -> Measured:
    """The retrieved cases of earlier sessions that were made from this very kernel (the
    incumbent's operator version, target, source, flags and threads), by the kernel each made:
    the gain the evaluator measured then, capped like any case's. This session's own cases are
    left out: what it tried on the incumbent it does not try again."""
    incumbent = situation.incumbent
    measured: Measured = {}
    if incumbent is None:
        return measured
    for hit, case in cases:
        gain = case_gain(case)
        if gain is None or not made_from_this_kernel(case, situation):
            continue
        if case.correct and case.speedup_vs_parent:
            what = f"ran {case.speedup_vs_parent:.2f}x as fast as this kernel"
        else:
            what = f"was {case.outcome}"
        why = (f"{hit.key}: {first_line(case.strategy)} on this very kernel, in session "
               f"{case.session_id}, {what}")  # fmt: skip
        kernel = candidate_of_case(case).kernel_key
        measured.setdefault(kernel, []).append(Evidence(hit.key, case.strategy, gain, 1.0, why))
    return measured


def made_from_this_kernel(case: Case, situation: Situation) -> bool:
    incumbent = situation.incumbent
    parent = case.parent
    if incumbent is None or parent is None or parent.source is None or case.source is None:
        return False
    return (case.session_id != situation.session_id
            and case.version_id == situation.operator.version_id
            and case.target == situation.target
            and parent.source.text == incumbent.candidate.source
            and candidate_of_case(parent).kernel_key == incumbent.candidate.kernel_key)  # fmt: skip


def evidence_for(move: str, evidence: list[Evidence]) -> float:
    """The cases' weighted mean gain, shrunk toward 0 while little evidence speaks, plus the
    bonus of an approved rule that names the strategy."""
    relevant = [e for e in evidence if speaks_for(e.move, move)]
    cases = [e for e in relevant if not e.key.startswith("rule:")]
    mean = sum(e.says for e in cases) / (1.0 + sum(e.weight for e in cases))
    ruled = any(e.key.startswith("rule:") for e in relevant)
    return mean + (RULE_BONUS if ruled else 0.0)


def prior_order(features: frozenset[str]) -> tuple[str, ...]:
    if TEMPORARIES in features:
        # A lowered kernel's temporaries are whole tensors: freshly mapped on every call, they
        # cost KernelBench's HardSigmoid more than its arithmetic. A hand-written kernel's
        # scratch rows are small, and keeping them is a finer tool.
        order = [move for move in prior_order(features - {TEMPORARIES}) if move != KEEP_BUFFERS]
        return (*LOWERINGS, KEEP_BUFFERS, *order[len(LOWERINGS) :])
    if MATH_CALLS in features:
        # -ffast-math is what lets gcc call the vector math library: taken out again, the
        # softmaxes and gelu ran 4-10x slower (nine rounds of a suite run spent on it)
        return (*(move for move in PRIOR_ORDER if move != DROP_FLAGS), DROP_FLAGS)
    if features & REORDERING_PAYS_ON:
        return PRIOR_ORDER
    rest = [move for move in PRIOR_ORDER if move not in REORDERING_FLAGS]
    after = rest.index("omp_parallel_for") + 1
    return (*rest[:after], *REORDERING_FLAGS, *rest[after:])


def prior(move: str, order: tuple[str, ...] = PRIOR_ORDER) -> float:
    """The fixed prior of a move (`move_of` a label) in `order`, best first."""
    name = move if move in order else strategy_name(move)
    rank = order.index(name) if name in order else len(order)
    return PRIOR_WEIGHT * (len(order) - rank) / len(order)


# Within one strategy, the parameters to try first (the others come later, if rounds are left):
# a dynamic schedule hands out one iteration at a time, ruinous on a long elementwise loop.
PREFERRED_PARAMS = {"schedule": ("static", "dynamic"), "collapse": ("1", "2"),
                    "factor": ("4", "8", "2"), "size": ("32", "64", "16"),
                    "kc": ("512", "256", "128"),
                    "set": ("fast_math", "fp_contract", "unroll_loops")}  # fmt: skip


def label_params(label: str) -> dict[str, str]:
    """`name(a=1, b=x)` -> {"a": "1", "b": "x"}: the parameters of any strategy label."""
    inside = label.partition("(")[2].rpartition(")")[0]
    pairs = (part.partition("=") for part in inside.split(",") if "=" in part)
    return {key.strip(): value.strip() for key, _, value in pairs}


def param_preference(label: str) -> float:
    params = label_params(label)
    ranks = [
        PREFERRED_PARAMS[key].index(value)
        for key, value in params.items()
        if key in PREFERRED_PARAMS and value in PREFERRED_PARAMS[key]
    ]
    if strategy_name(label) == "omp_parallel_for":
        ranks.append(loop_number(params.get("loop", "")))
    return -float(sum(ranks))


def loop_number(loop: str) -> int:
    """Loops are numbered in source order, so an outer loop comes before the loops inside it:
    parallel outermost first, one fork and join per call rather than one per outer iteration."""
    return int(loop[1:]) if loop[1:].isdecimal() else 0


Score = tuple[float, float, float]
Measured = dict[KernelKey, list[Evidence]]


def score_key(candidate: Candidate, evidence: list[Evidence], seed: int,
              order: tuple[str, ...], replays: dict[str, Replay],
              measured: Measured | None = None,
              ablations: dict[str, Ablation] | None = None) -> Score:  # fmt: skip
    tie_break = random.Random(f"{seed}:{candidate.strategy}").random()  # noqa: S311
    here = (measured or {}).get(candidate.kernel_key)
    measured_gain = statistics.fmean(e.gain for e in here) if here else 0.0
    if candidate.strategy in replays:
        return (replays[candidate.strategy].score + measured_gain, 0.0, tie_break)
    ablation = (ablations or {}).get(candidate.strategy)
    if ablation is not None:  # like a flag set taken out again: the same idea
        return (prior(DROP_FLAGS, order) + measured_gain, ablation.preference, tie_break)
    move = move_of(candidate.strategy)
    score = prior(move, order) + evidence_for(move, evidence) + measured_gain
    dropped = flags_dropped_by(candidate.strategy)
    if dropped is not None:  # what memory says against a flag set speaks for taking it out
        score -= evidence_for(f"flags(set={dropped})", evidence)
    return (score, param_preference(candidate.strategy), tie_break)


def adoption(
    chosen: Candidate, ranked: list[Candidate], evidence: list[Evidence], order: tuple[str, ...]
) -> list[dict[str, str]]:
    """The items that decided: evidence for the chosen strategy, and failures that pushed a
    strategy the prior preferred below it."""
    move = move_of(chosen.strategy)
    adopted = {e.key: e.why for e in evidence if speaks_for(e.move, move) and e.says > 0}
    avoided = {move_of(c.strategy) for c in ranked[1:]} - {move}
    for e in evidence:
        pushed_down = any(speaks_for(e.move, other) for other in avoided)
        outranked = prior(e.move, order) > prior(move, order)
        if e.says < 0 and pushed_down and outranked:
            adopted.setdefault(e.key, f"avoided {e.move}: {e.why}")
    dropped = flags_dropped_by(chosen.strategy)
    for e in evidence if dropped is not None else []:
        if speaks_for(e.move, f"flags(set={dropped})") and e.says < 0:
            adopted.setdefault(e.key, f"took {dropped} out: {e.why}")
    return [{"key": key, "why": why} for key, why in adopted.items()]
