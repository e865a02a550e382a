"""The tools the loop offers a policy while it proposes: memory search, the experience forest
as plain values, diagnostic runs and the model's token meter, each bound to the iteration
that asked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from apps.agents.policy import Candidate, Tools
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation
from apps.devices.verdicts import describe_verdict
from apps.memory.case_views import (
    CaseView,
    case_view,
    child_views,
    proposed_kernel_of,
    tree_views,
)
from apps.memory.retrieval import Hit, Query, retrieve
from apps.memory.values import MemoryMode
from apps.runs.candidates import as_candidate

if TYPE_CHECKING:
    from apps.runs.loop import Iteration


class LoopTools(Tools):
    def __init__(self, iteration: Iteration) -> None:
        self.iteration = iteration

    def search_memory(self, text: str, limit: int = 8) -> list[Hit]:
        it = self.iteration
        if it.mode == MemoryMode.OFF:
            return []
        query = Query(text=text[:2000], team_id=it.session.team_id, target=it.config.target,
                      kinds=("case", "rule", "document"), limit=max(1, min(limit, 20)))  # fmt: skip
        return retrieve(query)

    def diagnose(self, candidate: Candidate, *, profile: bool, debug: bool) -> str:
        it = self.iteration
        options = EvalSettings(seeds=1, warmup=1, repeats=5, threads=candidate.threads,
                               timing=profile, profile=profile, debug=debug,
                               extra_flags=tuple(candidate.flags))  # fmt: skip
        evaluation = it.evaluate(it.version, candidate, options, it.session)
        if evaluation.status != Evaluation.Status.DONE:
            return f"the diagnostic run failed: {evaluation.error}"
        return describe_verdict(evaluation.verdict or {})[:6000]

    def note_tool(self, tool: str, summary: str) -> None:
        it = self.iteration
        it.append("tool_called", {"operator": it.entry.slug, "iteration": it.n, "tool": tool,
                                  "summary": summary[:2000]}, step="")  # fmt: skip

    def charge_model_call(self, model: str, usage: dict[str, int], attempts: int) -> None:
        """Journal the call; the journal adds its tokens to the session's total."""
        it = self.iteration
        # No step key: a call made again after a replay was made, and its tokens were spent.
        it.record_step("model_called", {"operator": it.entry.slug, "iteration": it.n,
                                        "model": model, "usage": usage, "attempts": attempts},
                       step="")  # fmt: skip
        it.progress.tokens_used += sum(usage.values())

    def tokens_left(self) -> int:
        it = self.iteration
        return max(0, it.config.budgets.tokens - it.progress.tokens_used)

    def case(self, case_id: int) -> CaseView | None:
        return case_view(case_id)

    def tree(self, case: CaseView) -> list[CaseView]:
        return tree_views(case)

    def children(self, case: CaseView) -> list[CaseView]:
        return child_views(case)

    def proposed(self, case: CaseView) -> Candidate:
        return as_candidate(proposed_kernel_of(case))
