"""Active context under a token budget (KOPE's Active Context Management), and passive mode.

`pack` rebuilds the prompt context before every iteration from the items the caller offers:
hot items (the task, the incumbent kernel, the latest verdict), warm items (retrieved Cases
and summaries), cold items (documentation). Tiers set admission priority, not storage.
`pack_passive` is the ablation baseline: the history as it came, cut where the budget ends.

The text is a sequence of blocks: a section header per tier (`# ...\\n`) and one block per
admitted item (`## key\\n` + text + `\\n`). Every block starts with `#` and ends with a newline,
and no pre-token of cl100k_base or o200k_base can span a newline followed by `#`, so the
tokens of the whole text are exactly the sum of its blocks' tokens. That is what makes the
budget hold by construction: each block is counted as it will appear, before it is admitted.

Ranking and admission (the guarantee the tests check):

* Items are ranked by tier (HOT, WARM, COLD), then required before not required, then
  priority (higher first), then key.
* In rank order, each item is offered the budget its betters left, `left`. Its cost is its
  block's tokens, plus its tier's section header when it is the first of its tier admitted.
  It is admitted in full if that costs at most `left`; else in its short form if it has one
  and that costs at most `left`; else it is cut. What it costs is taken from `left`.
* So a lower-ranked item is never admitted at the expense of a higher-ranked one: whenever an
  item is shortened or cut, every item ranked after it that is admitted in full costs less
  than the item's full form would have; and with a budget that covers every full block and
  header, everything is admitted in full.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Literal

from apps.core.tokens import count_tokens

DEFAULT_ENCODING = "o200k_base"
AdmissionState = Literal["admitted", "shortened", "cut"]
Mode = Literal["active", "passive"]


class Tier(IntEnum):
    HOT = 0
    WARM = 1
    COLD = 2

    @property
    def label(self) -> str:
        return self.name.lower()


SECTION_TITLES = {
    Tier.HOT: "Current task",
    Tier.WARM: "Experience from earlier attempts",
    Tier.COLD: "Reference",
}


@dataclass(frozen=True)
class ContextItem:
    key: str  # stable id: "case:42", "rule:7", "doc:cpu-c:cheatsheet", "task"
    tier: Tier
    text: str
    short_text: str | None = None  # a shorter form: a case's summary instead of its code
    priority: float = 0.0  # within a tier, higher first (a retrieval score, say)
    required: bool = False  # ranked first in its tier; cut only when even its short form fails

    def __post_init__(self) -> None:
        object.__setattr__(self, "tier", Tier(self.tier))  # a plain 0/1/2 is accepted too
        if not self.key or "\n" in self.key:
            raise ValueError(f"a context key is one non-empty line, got {self.key!r}")
        if math.isnan(self.priority):
            raise ValueError(f"priority of {self.key!r} is NaN")


@dataclass(frozen=True)
class Admission:
    key: str
    tier: Tier
    state: AdmissionState
    tokens: int  # what its block occupies in the text; 0 when cut
    full_tokens: int  # what its full block would occupy
    short_tokens: int | None = None  # what its short block would occupy, if it has one
    required: bool = False

    def as_record(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "tier": self.tier.label,
            "state": self.state,
            "tokens": self.tokens,
            "full_tokens": self.full_tokens,
            "short_tokens": self.short_tokens,
            "required": self.required,
        }


@dataclass(frozen=True)
class PackedContext:
    text: str  # the assembled context: sections per tier (active mode), item blocks
    tokens: int  # count_tokens(text), never above budget
    budget: int
    admissions: list[Admission]  # every item once, in the order it was decided
    mode: Mode = "active"
    encoding: str = DEFAULT_ENCODING
    section_tokens: dict[str, int] = field(default_factory=dict)  # tier label -> header tokens

    def tokens_per_tier(self) -> dict[str, int]:
        """Tokens in the text per tier, its section header included; they sum to `tokens`."""
        totals = {tier.label: self.section_tokens.get(tier.label, 0) for tier in Tier}
        for admission in self.admissions:
            totals[admission.tier.label] += admission.tokens
        return totals

    def keys_in(self, state: AdmissionState) -> list[str]:
        return [a.key for a in self.admissions if a.state == state]

    def warnings(self) -> list[str]:
        """Required items that did not fit even in their shortest form."""
        return [
            f"required item {a.key!r} was cut: even its shortest form "
            f"({min(a.full_tokens, a.short_tokens or a.full_tokens)} tokens) did not fit"
            for a in self.admissions
            if a.required and a.state == "cut"
        ]

    def as_record(self) -> dict[str, Any]:
        """A JSON-able account of this packing, for the caller to store per iteration."""
        return {
            "mode": self.mode,
            "encoding": self.encoding,
            "budget": self.budget,
            "tokens": self.tokens,
            "tokens_per_tier": self.tokens_per_tier(),
            "admitted": self.keys_in("admitted"),
            "shortened": self.keys_in("shortened"),
            "cut": self.keys_in("cut"),
            "warnings": self.warnings(),
            "admissions": [a.as_record() for a in self.admissions],
        }


def pack(
    items: list[ContextItem], budget: int, *, encoding: str = DEFAULT_ENCODING
) -> PackedContext:
    """The highest-ranked items that fit in `budget` tokens, shortened where that lets them
    fit, in sections per tier (see the module docstring for the exact rule)."""
    check_input(items, budget)
    headers = {tier: section_header(tier) for tier in Tier}
    header_tokens = {tier: count_tokens(text, encoding) for tier, text in headers.items()}
    left = budget
    blocks: list[str] = []
    admissions: list[Admission] = []
    opened: set[Tier] = set()
    for item in sorted(items, key=rank):
        opening = 0 if item.tier in opened else header_tokens[item.tier]
        admission, block = admit(item, left - opening, encoding)
        admissions.append(admission)
        if block is not None:
            if item.tier not in opened:
                blocks.append(headers[item.tier])
                opened.add(item.tier)
            blocks.append(block)
            left -= opening + admission.tokens
    section_tokens = {tier.label: header_tokens[tier] for tier in opened}
    return assembled(blocks, budget - left, budget, admissions, "active", encoding, section_tokens)


def pack_passive(
    history: list[ContextItem], budget: int, *, encoding: str = DEFAULT_ENCODING
) -> PackedContext:
    """KOPE's ablation baseline: the history in the order given (oldest first), in full, up to
    the first item that does not fit; that item and everything after it are cut."""
    check_input(history, budget)
    blocks = [item_block(item.key, item.text) for item in history]
    costs = [count_tokens(block, encoding) for block in blocks]
    kept = fitting_prefix(costs, budget)
    admissions = [
        measured(item, "admitted" if position < kept else "cut", cost, None)
        for position, (item, cost) in enumerate(zip(history, costs, strict=True))
    ]
    return assembled(blocks[:kept], sum(costs[:kept]), budget, admissions, "passive", encoding, {})


def fitting_prefix(costs: list[int], budget: int) -> int:
    """How many leading costs fit in the budget together."""
    total = 0
    for position, cost in enumerate(costs):
        total += cost
        if total > budget:
            return position
    return len(costs)


def rank(item: ContextItem) -> tuple[Tier, bool, float, str]:
    return (item.tier, not item.required, -item.priority, item.key)


def section_header(tier: Tier) -> str:
    return f"# {SECTION_TITLES[tier]}\n"


def item_block(key: str, text: str, *, shortened: bool = False) -> str:
    return f"## {key}{' (short form)' if shortened else ''}\n{text}\n"


def admit(item: ContextItem, room: int, encoding: str) -> tuple[Admission, str | None]:
    """The best form of `item` that fits in `room` tokens, and its block (None when cut)."""
    forms: list[tuple[AdmissionState, str]] = [("admitted", item_block(item.key, item.text))]
    if item.short_text is not None:
        forms.append(("shortened", item_block(item.key, item.short_text, shortened=True)))
    counted = [(state, block, count_tokens(block, encoding)) for state, block in forms]
    full_tokens = counted[0][2]
    short_tokens = counted[1][2] if len(counted) > 1 else None
    for state, block, tokens in counted:
        if tokens <= room:
            return measured(item, state, full_tokens, short_tokens), block
    return measured(item, "cut", full_tokens, short_tokens), None


def measured(
    item: ContextItem, state: AdmissionState, full_tokens: int, short_tokens: int | None
) -> Admission:
    occupied = {"admitted": full_tokens, "shortened": short_tokens or 0, "cut": 0}[state]
    return Admission(
        key=item.key,
        tier=item.tier,
        state=state,
        tokens=occupied,
        full_tokens=full_tokens,
        short_tokens=short_tokens,
        required=item.required,
    )


def assembled(
    blocks: list[str],
    expected_tokens: int,
    budget: int,
    admissions: list[Admission],
    mode: Mode,
    encoding: str,
    section_tokens: dict[str, int],
) -> PackedContext:
    text = "".join(blocks)
    tokens = count_tokens(text, encoding)
    if tokens != expected_tokens:
        # Cannot happen with the block format above; if an encoding ever broke additivity,
        # failing here beats silently handing over more tokens than the budget.
        raise RuntimeError(
            f"{encoding} counted {tokens} tokens for blocks that sum to {expected_tokens}"
        )
    return PackedContext(text, tokens, budget, admissions, mode, encoding, section_tokens)


def check_input(items: Iterable[ContextItem], budget: int) -> None:
    if budget <= 0:
        raise ValueError(f"budget must be a positive number of tokens, got {budget}")
    duplicates = sorted(key for key, n in Counter(i.key for i in items).items() if n > 1)
    if duplicates:
        raise ValueError(f"duplicate context keys: {', '.join(map(repr, duplicates))}")
