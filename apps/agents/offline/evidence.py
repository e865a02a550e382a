"""What memory says of each move the offline search policy could make: the evidence of the
retrieved cases and approved rules, what earlier sessions measured on this very kernel, the
fixed prior, and which items decided the move it proposes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from apps.agents.offline.features import kernel_features, overlap
from apps.agents.offline.moves import (
    FLAG_MOVES,
    culprits,
    first_line,
    label_params,
    move_of,
    strategy_name,
)
from apps.agents.offline.replay import DROP_FLAGS, case_of, flags_dropped_by, is_replay
from apps.agents.policy import FAILED_OUTCOMES, Candidate, KernelKey, Situation, Tools
from apps.memory.case_views import CaseView
from apps.memory.retrieval import Hit

# --- what memory says ------------------------------------------------------------------------

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
UNTRIED_SETTING_SHARE = 0.5  # of the evidence of a move's other settings (evidence_for)
MAX_GAIN = 2.0  # ln-speedup cap, so one lucky case does not drown the rest


@dataclass(frozen=True)
class Evidence:
    key: str
    move: str  # what it speaks for: a strategy's name, or a kind of it (see move_of)
    gain: float  # ln speedup over its parent; FAILURE_GAIN when it broke the kernel
    weight: float  # how much it applies here, 0..1
    why: str
    setting: str = ""  # the strategy's parameters but its loop ("schedule=dynamic"), if known

    @property
    def says(self) -> float:
        return self.gain * self.weight


Measured = dict[KernelKey, list[Evidence]]


def speaks_for(evidence_move: str, move: str) -> bool:
    """A lesson about a kind of strategy speaks for that kind; one about the strategy as a
    whole (an approved rule that says "flags") speaks for every kind of it."""
    return evidence_move in (move, move.split("(", 1)[0])


RetrievedCases = list[tuple[Hit, CaseView]]


def retrieved_cases(hits: list[Hit], tools: Tools) -> RetrievedCases:
    """The retrieved cases, each read once, with the hit that brought it."""
    return [(hit, case) for hit in hits if (case := case_of(hit, tools)) is not None]


def gather_evidence(situation: Situation, cases: RetrievedCases) -> list[Evidence]:
    assert situation.incumbent is not None
    here = kernel_features(situation.incumbent.candidate.source)
    evidence = [e for hit, case in cases if (e := case_evidence(hit, case, situation, here))]
    for rule in situation.hot_rules:
        move = move_of(rule["statement"])
        evidence.append(Evidence(rule["key"], move, RULE_BONUS, 1.0,
                                 f"approved rule {rule['key']} recommends {move}"))  # fmt: skip
    return evidence


def case_evidence(hit: Hit, case: CaseView, situation: Situation,
                  here: frozenset[str]) -> Evidence | None:  # fmt: skip
    if case.parent_source is None:
        return None  # a starting kernel says nothing about a strategy
    incumbent = situation.incumbent
    move = move_spoken_for(case)
    if (incumbent is not None and case.parent_source == incumbent.candidate.source
            and strategy_name(move) not in FLAG_MOVES):  # fmt: skip
        # Made from this very source: what a loop move did says nothing sure about the same
        # move on another loop of it (the inner loop's parallel region lost 7x on
        # gather_rows; the outer one's gained 1.8x). A flag set is the same move on any
        # flags, so its record here is the surest evidence there is.
        return None
    family = 1.0 if case.family == situation.operator.family else OTHER_FAMILY_FACTOR
    alike = overlap(here, kernel_features(case.parent_source))
    weight = max(0.0, hit.scores.get("similarity", 0.0)) * alike * family
    where = f"{hit.key} ({case.operator}, a kernel {alike:.0%} alike)"
    if case.same_binary:
        return Evidence(hit.key, move, 0.0, weight,
                        f"{where} compiled to its parent's very binary with {move}")  # fmt: skip
    gain = case_gain(case)
    if gain is None:
        return None
    setting = setting_of(case.strategy) if move == move_of(case.strategy) else ""
    if case.correct and case.speedup_vs_parent:
        verb = "improved" if gain > 0 else "slowed"
        return Evidence(hit.key, move, gain, weight,
                        f"{where} {verb} {case.speedup_vs_parent:.2f}x with {move}",
                        setting)  # fmt: skip
    after = move if move == move_of(case.strategy) else (
        f"a replayed path whose one step that can change a result was {move}")  # fmt: skip
    return Evidence(hit.key, move, gain, weight, f"{where} was {case.outcome} after {after}",
                    setting)  # fmt: skip


def setting_of(label: str) -> str:
    """A strategy's parameters other than the loop it applies to, as text: what a case says
    of a parallel loop's schedule or a tile's size carries over to another loop."""
    params = label_params(first_line(label))
    return ", ".join(f"{key}={value}" for key, value in sorted(params.items()) if key != "loop")


def move_spoken_for(case: CaseView) -> str:
    """What a case speaks for: its strategy, or for a replayed path that broke an elementwise
    map, its one step that can change a result (see culprits), as if it had broken the kernel
    alone. swiglu, after sigmoid's replay with -ffast-math broke sigmoid, spent a round on
    -ffast-math and broke the same way."""
    broken = case.parent_source  # the kernel the path broke
    if is_replay(case.strategy) and case.outcome in FAILED_OUTCOMES and broken is not None:
        blamed = culprits(case.strategy, broken)
        if len(blamed) == 1:
            return move_of(blamed[0])
    return move_of(case.strategy)


def case_gain(case: CaseView) -> float | None:
    """What a case says of its strategy: ln of its speedup over its parent, capped at
    MAX_GAIN either way, or FAILURE_GAIN when it broke the kernel; None when it says nothing
    (not timed)."""
    if case.correct and case.speedup_vs_parent:
        return max(-MAX_GAIN, min(MAX_GAIN, math.log(case.speedup_vs_parent)))
    if case.outcome in FAILED_OUTCOMES:
        return FAILURE_GAIN
    return None


def measured_from_here(situation: Situation, cases: RetrievedCases, tools: Tools) -> Measured:
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
        if gain is None or not made_from_this_kernel(case, situation, tools):
            continue
        if case.correct and case.speedup_vs_parent:
            what = f"ran {case.speedup_vs_parent:.2f}x as fast as this kernel"
        else:
            what = f"was {case.outcome}"
        why = (f"{hit.key}: {first_line(case.strategy)} on this very kernel, in session "
               f"{case.session_id}, {what}")  # fmt: skip
        kernel = tools.proposed(case).kernel_key
        measured.setdefault(kernel, []).append(Evidence(hit.key, case.strategy, gain, 1.0, why))
    return measured


def made_from_this_kernel(case: CaseView, situation: Situation, tools: Tools) -> bool:
    incumbent = situation.incumbent
    if incumbent is None or case.parent_id is None or case.parent_source is None:
        return False
    same_source = (case.source is not None and case.session_id != situation.session_id
                   and case.version_id == situation.operator.version_id
                   and case.target == situation.target
                   and case.parent_source == incumbent.candidate.source)  # fmt: skip
    parent = tools.case(case.parent_id) if same_source else None
    kernel = incumbent.candidate.kernel_key
    return parent is not None and tools.proposed(parent).kernel_key == kernel


def evidence_for(move: str, evidence: list[Evidence], setting: str | None = None) -> float:
    """The cases' weighted mean gain, shrunk toward 0 while little evidence speaks, plus the
    bonus of an approved rule that names the strategy. Given a `setting` (see setting_of),
    only the cases of that very setting speak where there are any: a dynamic schedule that
    made a parallel loop 40x slower says little of a static one. A setting no case tried
    gets half of what the move's other settings say: a static schedule that paid speaks for
    itself before it speaks for an untried dynamic one."""
    relevant = [e for e in evidence if speaks_for(e.move, move)]
    cases = [e for e in relevant if not e.key.startswith("rule:")]
    share = 1.0
    if setting is not None:
        tried = [e for e in cases if e.setting == setting]
        cases, share = (tried, 1.0) if tried else (cases, UNTRIED_SETTING_SHARE)
    mean = sum(e.says for e in cases) / (1.0 + sum(e.weight for e in cases))
    ruled = any(e.key.startswith("rule:") for e in relevant)
    return share * mean + (RULE_BONUS if ruled else 0.0)


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


# No strategy order at all: every move's prior is 0 (the blank-prior policy).
BLANK_ORDER: tuple[str, ...] = ()


def prior(move: str, order: tuple[str, ...] = PRIOR_ORDER) -> float:
    """The fixed prior of a move (`move_of` a label) in `order`, best first; 0 in no order."""
    if not order:
        return 0.0
    name = move if move in order else strategy_name(move)
    rank = order.index(name) if name in order else len(order)
    return PRIOR_WEIGHT * (len(order) - rank) / len(order)


# Within one strategy, the parameters to try first (the others come later, if rounds are left):
# a dynamic schedule hands out one iteration at a time, ruinous on a long elementwise loop.
PREFERRED_PARAMS = {"schedule": ("static", "dynamic"), "collapse": ("1", "2"),
                    "factor": ("4", "8", "2"), "size": ("32", "64", "16"),
                    "kc": ("512", "256", "128"),
                    "set": ("fast_math", "fp_contract", "unroll_loops")}  # fmt: skip


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
