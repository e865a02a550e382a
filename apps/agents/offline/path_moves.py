"""A path memory brought back, as moves of the offline search policy: a retrieved path
replayed on the starting kernel as one candidate (apps/agents/offline/replay.py finds the
paths), and a replayed kernel that gained far less than its path did made again with only
some of the path's steps (its ablations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from apps.agents.offline.evidence import (
    LOWERINGS,
    MAX_GAIN,
    OTHER_FAMILY_FACTOR,
    Measured,
    prior,
)
from apps.agents.offline.features import kernel_features, overlap, same_role_loop
from apps.agents.offline.moves import (
    broken_flag_sets,
    flag_moves,
    label_params,
    move_of,
    source_move,
    strategy_name,
    thread_moves,
)
from apps.agents.offline.replay import (
    REPLAY,
    Path,
    Step,
    fits,
    head_of,
    is_replay,
    lineage_of,
    paths,
    replay_label,
    steps_of,
)
from apps.agents.offline.transforms import (
    Strategy,
    TransformError,
    apply,
    strategy_from_label,
)
from apps.agents.policy import Candidate, Situation, Tools
from apps.memory.case_views import CaseView

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
                 measured: Measured, tools: Tools) -> list[Replay]:  # fmt: skip
    """Each retrieved path replayed on the starting kernel, where two or more of its steps
    apply and gained there (one, on the operator's own path from this very start, unless
    `measured` already holds the ordinary move that makes its kernel), and it makes every
    lowering among `options` that it could. Only from the start: the steps were found from a
    start, in order."""
    incumbent = situation.incumbent
    if incumbent is None or not situation.retrieved or not at_start(incumbent.case_id, tools):
        return []
    here = kernel_features(incumbent.candidate.source)
    lowerings = {strategy_name(c.strategy) for c in options} & set(LOWERINGS)
    found = paths(situation.retrieved, session_id=situation.session_id,
                  version_id=situation.operator.version_id, tools=tools)  # fmt: skip
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


def at_start(case_id: int, tools: Tools) -> bool:
    case = tools.case(case_id)
    return case is not None and case.parent_id is None


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


def ablation_moves(situation: Situation, order: tuple[str, ...], tools: Tools) -> list[Ablation]:
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
    incumbent_case = tools.case(incumbent.case_id) if incumbent else None
    if incumbent_case is None:
        return []
    case = (incumbent_case if is_replay(incumbent_case.strategy)
            else replay_that_fell_short(incumbent_case, tools))  # fmt: skip
    if case is None:
        return []
    start = lineage_of(case, tools.tree(case))[0]
    if not underdelivered(case, start, tools):
        return []
    steps = steps_of(case.strategy)
    sources = [i for i, step in enumerate(steps) if not sets_flags_or_threads(step)]
    base, followed = tools.proposed(start), followed_case_id(case.strategy)
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


def replay_that_fell_short(start: CaseView, tools: Tools) -> CaseView | None:
    """The first replay this session made from `start`, a starting kernel that is still the
    incumbent, so one that came out correct but no faster: its steps were timed only together
    too (cross_entropy's path read 0.98x on avg_pool2d, whose parallel loop alone made it
    1.9x; -ffast-math, tried alone next, 0.55x). The first, because the ablations made from the
    start are replays too, and one that fell short in turn would leave no ablations of its
    own."""
    if start.parent_id is not None:
        return None
    return next((child for child in tools.children(start) if child.correct
                 and child.strategy.startswith(f"{REPLAY}(") and child.latency_ms is not None),
                None)  # fmt: skip


def underdelivered(case: CaseView, start: CaseView, tools: Tools) -> bool:
    """Whether a replayed kernel gained over its start less than UNDERDELIVERED_SHARE of what
    the path it followed gained over its own start."""
    followed = tools.case(followed_case_id(case.strategy))
    if followed is None or not (case.latency_ms and start.latency_ms and followed.latency_ms):
        return False
    origin = lineage_of(followed, tools.tree(followed))[0]
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
