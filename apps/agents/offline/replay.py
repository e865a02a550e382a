"""Paths of the experience forest worth replaying: the strategies that took an operator's
starting kernel to the best kernel of its tree, in order.

A retrieved case points to its tree (the cases of one operator in one session); the lineage
of the tree's last incumbent, back to its start, is the path, each step with its share of the
speedup it brought there. The offline policy replays a path on a starting kernel as one
candidate (see path_moves.replay_moves), so what took a similar operator several rounds to find
costs one here. A replayed candidate's label names the case it followed and the steps it
applied, so a path through it expands to those steps.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

from apps.agents.policy import MAX_STRATEGY_CHARS, Tools
from apps.memory.case_views import CaseView
from apps.memory.keys import id_in_key
from apps.memory.retrieval import Hit

REPLAY = "replay"
STEP_SEPARATOR = "; "
DROP_FLAGS = "drop_flags"  # `drop_flags(set=fast_math)`: a replayed flag set taken out again
IMPROVED = "improved"  # a case's outcome when its kernel replaced its parent


@dataclass(frozen=True)
class Step:
    label: str  # a strategy label
    gain: float  # ln of the speedup it brought over its parent where it was found


@dataclass(frozen=True)
class Path:
    key: str  # the retrieved case that led to the tree
    similarity: float  # that hit's retrieval similarity
    operator: str
    family: str
    version_id: int
    target: str
    best_case_id: int
    start_source: str
    steps: tuple[Step, ...]  # from the start to the best kernel
    speedup: float  # the best kernel's latency over its start's


def replay_label(case_id: int, steps: list[str]) -> str:
    """`replay(case=N): a; b; c`: the case whose path was followed, and the steps applied."""
    return f"{REPLAY}(case={case_id}): " + STEP_SEPARATOR.join(steps)


def fits(label: str) -> bool:
    """Whether a case's strategy field keeps the label whole (a cut one would lose steps)."""
    return len(label) <= MAX_STRATEGY_CHARS


def is_replay(label: str) -> bool:
    return label.startswith(f"{REPLAY}(")


def head_of(label: str) -> str:
    """A label without a replay's steps: `replay(case=N)`; any other label as it is."""
    return label.partition(": ")[0] if is_replay(label) else label


def steps_of(label: str) -> list[str]:
    """The strategies a label applied: the steps of a replay, else the label itself."""
    if not is_replay(label):
        return [label.strip()]
    listed = label.partition("): ")[2]
    return [step.strip() for step in listed.split(STEP_SEPARATOR) if step.strip()]


def paths(hits: list[Hit], *, session_id: int, version_id: int, tools: Tools) -> list[Path]:
    """One path per tree the retrieved cases point to, best first; the tree being grown now
    (this session, this operator) is left out."""
    found: dict[int, Path] = {}
    for hit in hits:
        case = case_of(hit, tools)
        if case is None or (case.session_id, case.version_id) == (session_id, version_id):
            continue
        path = best_path(case, hit, tools)
        if path is not None and path.best_case_id not in found:
            found[path.best_case_id] = path
    return sorted(found.values(), key=lambda p: -p.speedup)


def case_of(hit: Hit, tools: Tools) -> CaseView | None:
    case_id = id_in_key(hit.key, "case")
    if hit.kind != "case" or case_id is None:
        return None
    return tools.case(case_id)


def best_path(case: CaseView, hit: Hit, tools: Tools) -> Path | None:
    """The path to the last incumbent of `case`'s tree (each kernel on it was judged faster
    than its parent); None while nothing in the tree has replaced its start."""
    tree = tools.tree(case)
    improved = [c for c in tree if c.outcome == IMPROVED and c.correct
                and c.latency_ms is not None and c.parent_id is not None]  # fmt: skip
    best = max(improved, key=lambda c: c.iteration, default=None)
    if best is None or best.latency_ms is None:
        return None
    lineage = lineage_of(best, tree)
    start = lineage[0]
    if start.source is None or not start.latency_ms or best.latency_ms >= start.latency_ms:
        return None
    steps = without_undone(steps_along(lineage))
    return Path(
        key=hit.key, similarity=max(0.0, hit.scores.get("similarity", 0.0)),
        operator=case.operator, family=case.family, version_id=case.version_id,
        target=case.target, best_case_id=best.id,
        start_source=start.source, steps=steps, speedup=start.latency_ms / best.latency_ms,
    )  # fmt: skip


def without_undone(steps: Iterable[Step]) -> tuple[Step, ...]:
    """The steps less each flag set taken out again later, and the step that took it out:
    replayed, the pair would only add the flags and drop them."""
    kept: list[Step] = []
    for step in steps:
        added = flags_dropped_by(step.label)
        if added is None:
            kept.append(step)
            continue
        undone = [i for i, earlier in enumerate(kept) if earlier.label == f"flags(set={added})"]
        if undone:
            del kept[undone[-1]]
    return tuple(kept)


def flags_dropped_by(label: str) -> str | None:
    """`fast_math` for `drop_flags(set=fast_math)`; None for any other label."""
    name, _, rest = label.strip().partition("(set=")
    return rest[:-1] if name == DROP_FLAGS and rest.endswith(")") else None


def lineage_of(case: CaseView, tree: list[CaseView]) -> list[CaseView]:
    """`case` and its ancestors in `tree` (tools.tree of it), the starting kernel first."""
    by_id = {c.id: c for c in tree}
    chain, seen = [case], {case.id}
    while (parent := by_id.get(chain[-1].parent_id or 0)) is not None and parent.id not in seen:
        chain.append(parent)
        seen.add(parent.id)
    return chain[::-1]


def steps_along(lineage: list[CaseView]) -> list[Step]:
    """The steps from the start of `lineage` to its last case. A replayed kernel is made from
    the start whatever its parent (a replay made again without one of its steps is a child of
    the replay): the path to it is its own steps, sharing its gain over the start."""
    start, steps = lineage[0], list[Step]()
    for parent, child in itertools.pairwise(lineage):
        if is_replay(child.strategy):
            steps = steps_with_gains(start, child)
        else:
            steps += steps_with_gains(parent, child)
    return steps


def steps_with_gains(parent: CaseView, child: CaseView) -> list[Step]:
    """The steps that made `child` from `parent` (an ancestor, for a replay), sharing its gain
    equally (the steps of a replay were timed together)."""
    speedup = child.speedup_vs_parent if child.parent_id == parent.id else None
    if not speedup and parent.latency_ms and child.latency_ms:
        speedup = parent.latency_ms / child.latency_ms
    labels = steps_of(child.strategy)
    gain = math.log(speedup) / len(labels) if speedup and speedup > 0 else 0.0
    return [Step(label, gain) for label in labels]
