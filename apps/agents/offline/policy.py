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

import random
import statistics

from apps.agents.offline.evidence import (
    BLANK_ORDER,
    LOWERINGS,
    Evidence,
    Measured,
    adoption,
    evidence_for,
    gather_evidence,
    measured_from_here,
    param_preference,
    prior,
    prior_order,
    retrieved_cases,
    setting_of,
)
from apps.agents.offline.features import kernel_features
from apps.agents.offline.moves import (
    culprits,
    first_line,
    label_params,
    move_of,
    moves,
    strategy_name,
)
from apps.agents.offline.path_moves import Ablation, Replay, ablation_moves, replay_moves
from apps.agents.offline.replay import DROP_FLAGS, flags_dropped_by, is_replay, steps_of
from apps.agents.offline.transforms import (
    interchange_reorders_tiles,
    interchange_stride_gain,
    tile_finds_no_reuse,
    tile_splits_a_tile,
    tile_walks_in_order,
)
from apps.agents.policy import Candidate, Proposal, Situation, Tools
from apps.memory.values import Distiller, summarizer


class OfflineSearchPolicy:
    """With `blank_prior`, the policy knows nothing it was not shown: no strategy order, no
    preferred parameters, no compiler cost model; what it has not measured or recalled it tries
    in a seeded random order. `bench kernels` measures what memory teaches in that setting."""

    name = "offline"

    def __init__(self, *, blank_prior: bool = False) -> None:
        self.blank_prior = blank_prior

    def distiller(self) -> Distiller:
        return summarizer

    def propose(self, situation: Situation, tools: Tools) -> Proposal:
        if situation.incumbent is None:
            return Proposal(None, rationale=no_start_reason(situation))
        source = situation.incumbent.candidate.source
        order = BLANK_ORDER if self.blank_prior else prior_order(kernel_features(source))
        written_in = not self.blank_prior
        ordinary = moves(situation, tools)
        cases = retrieved_cases(situation.retrieved, tools)
        measured = measured_from_here(situation, cases, tools)
        replays = {r.candidate.strategy: r
                   for r in replay_moves(situation, ordinary, order, measured, tools)}  # fmt: skip
        ablations = {a.candidate.strategy: a for a in ablation_moves(situation, order, tools)}
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
        scored = sorted(options, reverse=True, key=lambda c: (
            not (written_in and walks_memory_worse(c.strategy, source)),
            (move_key(c.strategy) not in worn or c.strategy in ablations)
            and c.strategy not in situation.lost and c.strategy not in blamed,
            written_in and makes_a_lowering_memory_does_not_fault(c, evidence)
            and c.strategy not in ablations,
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
            "; ".join(a["why"] for a in adopted) if adopted else
            ("next by the fixed prior" if written_in else "untried, chosen at random")
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


Score = tuple[float, float, float]


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
    # With no written-in parameter preference, memory says which setting of a move to try.
    setting = None if order else setting_of(candidate.strategy)
    score = prior(move, order) + evidence_for(move, evidence, setting) + measured_gain
    dropped = flags_dropped_by(candidate.strategy)
    if dropped is not None:  # what memory says against a flag set speaks for taking it out
        score -= evidence_for(f"flags(set={dropped})", evidence)
    preference = param_preference(candidate.strategy) if order else 0.0
    return (score, preference, tie_break)
