"""Packing the active context under a token budget, and the passive baseline."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.agents.context import (
    Admission,
    ContextItem,
    PackedContext,
    Tier,
    item_block,
    pack,
    pack_passive,
    section_header,
)
from apps.core.tokens import count_tokens

# Characters that stress token boundaries between blocks: newlines, "#", "/", spaces,
# punctuation, digits, accents, CJK, emoji; plus anything else Unicode offers.
TRICKY = "ab Z9#/\n\r\t.:'é日🙂\u00a0"
texts = st.text(alphabet=st.sampled_from(TRICKY), max_size=80) | st.text(max_size=40)
items_strategy = st.lists(
    st.builds(
        ContextItem,
        key=st.text(alphabet="abcxyz:0123456789-", min_size=1, max_size=8),
        tier=st.sampled_from(Tier),
        text=texts,
        short_text=st.none() | texts,
        priority=st.floats(min_value=-5, max_value=5, allow_nan=False),
        required=st.booleans(),
    ),
    max_size=12,
    unique_by=lambda item: item.key,
)
budgets = st.integers(min_value=1, max_value=12) | st.integers(min_value=1, max_value=400)


def item(key: str, tier: Tier, words: int, **kwargs: object) -> ContextItem:
    return ContextItem(key, tier, " ".join(["word"] * words), **kwargs)  # type: ignore[arg-type]


# --- the property tests -----------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(items=items_strategy, budget=budgets)
def test_pack_keeps_every_promise(items: list[ContextItem], budget: int) -> None:
    packed = pack(items, budget)
    assert packed.tokens == count_tokens(packed.text) <= budget
    assert sorted(a.key for a in packed.admissions) == sorted(i.key for i in items)
    assert sum(packed.tokens_per_tier().values()) == packed.tokens
    assert_decided_in_rank_order(packed, items)
    assert_greedy_by_rank(packed)
    assert_no_priority_inversion(packed)
    assert_text_is_the_admitted_blocks(packed, items)
    json.dumps(packed.as_record())


@settings(max_examples=200, deadline=None)
@given(items=items_strategy, spare=st.integers(min_value=0, max_value=50))
def test_a_budget_that_covers_everything_admits_everything_in_full(
    items: list[ContextItem], spare: int
) -> None:
    headers = sum(count_tokens(section_header(t)) for t in {i.tier for i in items})
    blocks = sum(count_tokens(item_block(i.key, i.text)) for i in items)
    packed = pack(items, headers + blocks + spare + 1)
    assert all(a.state == "admitted" for a in packed.admissions)
    assert packed.tokens == headers + blocks


@settings(max_examples=100, deadline=None)
@given(items=items_strategy, budget=budgets)
def test_budget_holds_under_cl100k_too(items: list[ContextItem], budget: int) -> None:
    packed = pack(items, budget, encoding="cl100k_base")
    assert packed.tokens == count_tokens(packed.text, "cl100k_base") <= budget


@settings(max_examples=300, deadline=None)
@given(items=items_strategy, budget=budgets)
def test_passive_keeps_order_and_cuts_a_suffix(items: list[ContextItem], budget: int) -> None:
    packed = pack_passive(items, budget)
    assert packed.tokens == count_tokens(packed.text) <= budget
    assert [a.key for a in packed.admissions] == [i.key for i in items]
    states = [a.state for a in packed.admissions]
    kept = states.count("admitted")
    assert states == ["admitted"] * kept + ["cut"] * (len(items) - kept)
    assert packed.text == "".join(item_block(i.key, i.text) for i in items[:kept])
    if kept < len(items):  # the first cut item really did not fit
        assert packed.tokens + packed.admissions[kept].full_tokens > budget
    assert sum(packed.tokens_per_tier().values()) == packed.tokens


def assert_decided_in_rank_order(packed: PackedContext, items: list[ContextItem]) -> None:
    """Tier first, then required before not, then priority descending, then key."""
    ranked = sorted(items, key=lambda i: (i.tier, not i.required, -i.priority, i.key))
    assert [a.key for a in packed.admissions] == [i.key for i in ranked]


def assert_greedy_by_rank(packed: PackedContext) -> None:
    """Each item gets the best form that fits in what the items ranked before it left."""
    left, opened = packed.budget, set()
    for a in packed.admissions:
        opening = 0 if a.tier in opened else count_tokens(section_header(a.tier))
        if a.full_tokens + opening <= left:
            expected = "admitted"
        elif a.short_tokens is not None and a.short_tokens + opening <= left:
            expected = "shortened"
        else:
            expected = "cut"
        assert a.state == expected, (a, left)
        if a.state != "cut":
            left -= opening + a.tokens
            opened.add(a.tier)


def assert_no_priority_inversion(packed: PackedContext) -> None:
    """When an item is shortened or cut, everything ranked after it that is admitted in full
    is smaller than its full form (with the section header it would have opened)."""
    opened: set[Tier] = set()
    for position, a in enumerate(packed.admissions):
        if a.state != "admitted":
            full_cost = a.full_tokens + full_opening_cost(a, opened)
            later_full = [b for b in packed.admissions[position + 1 :] if b.state == "admitted"]
            assert all(b.full_tokens < full_cost for b in later_full), (a, later_full)
        if a.state != "cut":
            opened.add(a.tier)


def full_opening_cost(a: Admission, opened: set[Tier]) -> int:
    return 0 if a.tier in opened else count_tokens(section_header(a.tier))


def assert_text_is_the_admitted_blocks(packed: PackedContext, items: list[ContextItem]) -> None:
    by_key = {i.key: i for i in items}
    expected, opened = [], set()
    for a in packed.admissions:
        if a.state == "cut":
            continue
        if a.tier not in opened:
            expected.append(section_header(a.tier))
            opened.add(a.tier)
        source = by_key[a.key]
        shown = source.text if a.state == "admitted" else source.short_text
        assert shown is not None
        expected.append(item_block(a.key, shown, shortened=a.state == "shortened"))
        assert count_tokens(expected[-1]) == a.tokens
    assert packed.text == "".join(expected)


@settings(max_examples=300, deadline=None)
@given(
    encoding=st.sampled_from(["o200k_base", "cl100k_base"]),
    blocks=st.lists(
        st.builds(
            item_block, key=texts.filter(lambda k: k != ""), text=texts, shortened=st.booleans()
        )
        | st.sampled_from(Tier).map(section_header),
        max_size=6,
    ),
)
def test_block_tokens_add_up_exactly(encoding: str, blocks: list[str]) -> None:
    """What the budget guarantee rests on: no token spans two blocks."""
    whole = count_tokens("".join(blocks), encoding)
    assert whole == sum(count_tokens(block, encoding) for block in blocks)


# --- examples ---------------------------------------------------------------------------------


def test_sections_come_in_tier_order_whatever_the_input_order() -> None:
    items = [
        item("doc:x", Tier.COLD, 5),
        item("case:1", Tier.WARM, 5, priority=0.2),
        item("case:2", Tier.WARM, 5, priority=0.9),
        item("task", Tier.HOT, 5, required=True),
    ]
    packed = pack(items, 1000)
    assert [a.key for a in packed.admissions] == ["task", "case:2", "case:1", "doc:x"]
    text = packed.text
    assert text.index("# Current task") < text.index("## task") < text.index("# Experience")
    assert text.index("## case:2") < text.index("## case:1") < text.index("# Reference")


def test_required_items_come_first_in_their_tier_only() -> None:
    items = [
        item("hot", Tier.HOT, 3, priority=-1.0),
        item("warm-required", Tier.WARM, 3, required=True),
        item("hot-required", Tier.HOT, 3, required=True, priority=-9.0),
    ]
    assert [a.key for a in pack(items, 1000).admissions] == ["hot-required", "hot", "warm-required"]


def test_a_long_item_is_shortened_when_its_full_form_does_not_fit() -> None:
    task = item("task", Tier.HOT, 10, required=True)
    case = ContextItem("case:42", Tier.WARM, "int kope_kernel(...) { ... }\n" * 50,
                       short_text="blocked GEMM, 1.8x, correct")  # fmt: skip
    packed = pack([task, case], 120)
    states = {a.key: a.state for a in packed.admissions}
    assert states == {"task": "admitted", "case:42": "shortened"}
    assert "## case:42 (short form)\nblocked GEMM, 1.8x, correct\n" in packed.text
    assert "kope_kernel" not in packed.text


def test_a_lower_tier_item_fills_the_room_a_bigger_higher_one_could_not_use() -> None:
    task = item("task", Tier.HOT, 5)
    big_case = item("case:big", Tier.WARM, 300)
    small_doc = item("doc:small", Tier.COLD, 3)
    packed = pack([task, big_case, small_doc], 60)
    states = {a.key: a.state for a in packed.admissions}
    assert states == {"task": "admitted", "case:big": "cut", "doc:small": "admitted"}


def test_a_required_item_that_cannot_fit_is_cut_and_said_so() -> None:
    task = item("task", Tier.HOT, 500, required=True, short_text="word " * 100)
    packed = pack([task], 50)
    assert packed.admissions[0].state == "cut"
    assert packed.text == ""
    record = packed.as_record()
    assert record["cut"] == ["task"]
    assert record["warnings"] == [
        "required item 'task' was cut: even its shortest form "
        f"({packed.admissions[0].short_tokens} tokens) did not fit"
    ]


def test_a_tiny_budget_admits_nothing_and_stays_within_it() -> None:
    packed = pack([item("task", Tier.HOT, 1)], 1)
    assert packed.text == "" and packed.tokens == 0
    assert packed.admissions[0].state == "cut"


def test_the_record_says_what_was_admitted_shortened_and_cut() -> None:
    items = [
        item("task", Tier.HOT, 5, required=True),
        ContextItem("case:1", Tier.WARM, "word " * 200, short_text="summary"),
        item("doc:1", Tier.COLD, 400),
    ]
    packed = pack(items, 80)
    record = json.loads(json.dumps(packed.as_record()))
    assert record["mode"] == "active" and record["budget"] == 80
    assert record["admitted"] == ["task"]
    assert record["shortened"] == ["case:1"]
    assert record["cut"] == ["doc:1"]
    assert record["tokens"] == packed.tokens == sum(record["tokens_per_tier"].values())
    assert record["tokens_per_tier"]["cold"] == 0
    assert record["admissions"][1] == {
        "key": "case:1", "tier": "warm", "state": "shortened",
        "tokens": packed.admissions[1].tokens, "full_tokens": packed.admissions[1].full_tokens,
        "short_tokens": packed.admissions[1].tokens, "required": False,
    }  # fmt: skip


def test_passive_mode_keeps_history_order_and_never_shortens() -> None:
    history = [
        item("iter:1", Tier.HOT, 5),
        ContextItem("iter:2", Tier.WARM, "word " * 100, short_text="short"),
        item("iter:3", Tier.COLD, 1),
    ]
    packed = pack_passive(history, 40)
    assert [(a.key, a.state) for a in packed.admissions] == [
        ("iter:1", "admitted"), ("iter:2", "cut"), ("iter:3", "cut"),
    ]  # fmt: skip
    assert packed.as_record()["mode"] == "passive"
    assert packed.text == item_block("iter:1", history[0].text)


@pytest.mark.parametrize("budget", [0, -5])
def test_a_non_positive_budget_is_refused(budget: int) -> None:
    with pytest.raises(ValueError, match="budget must be a positive number of tokens"):
        pack([], budget)
    with pytest.raises(ValueError, match="budget must be a positive number of tokens"):
        pack_passive([], budget)


def test_duplicate_keys_are_refused() -> None:
    items = [item("case:1", Tier.WARM, 1), item("case:1", Tier.COLD, 2), item("x", Tier.HOT, 1)]
    with pytest.raises(ValueError, match="duplicate context keys: 'case:1'"):
        pack(items, 100)
    with pytest.raises(ValueError, match="duplicate context keys: 'case:1'"):
        pack_passive(items, 100)


@pytest.mark.parametrize("key", ["", "two\nlines"])
def test_keys_are_one_non_empty_line(key: str) -> None:
    with pytest.raises(ValueError, match="a context key is one non-empty line"):
        ContextItem(key, Tier.HOT, "text")


def test_a_plain_integer_tier_becomes_a_tier_and_a_bad_one_is_refused() -> None:
    assert ContextItem("x", 1, "text").tier is Tier.WARM  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="3 is not a valid Tier"):
        ContextItem("x", 3, "text")  # type: ignore[arg-type]


def test_nan_priority_is_refused() -> None:
    with pytest.raises(ValueError, match="priority of 'x' is NaN"):
        ContextItem("x", Tier.HOT, "text", priority=float("nan"))
