"""Temporaries kept between calls: `keep_buffers`."""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from apps.agents.offline.cparse import (
    Edit,
    declarator_name,
    field,
    identifiers,
    insertion,
    line_start,
    replacement,
    same,
    text,
    walk,
)
from apps.agents.offline.transforms.analysis import _Kernel
from apps.agents.offline.transforms.catalogue import Strategy
from apps.agents.offline.transforms.preconditions import _fail

KEPT_NAME = "kope_kept"
KEPT_SLOTS = 32
ALLOCATORS = ("malloc", "kope_alloc")
KEPT_SOURCE = f"""#include <stdlib.h>
/* {KEPT_NAME}: a buffer of at least `bytes` for allocation site `slot`, kept from one call to
 * the next (grown, never shrunk or freed): a temporary of megabytes from malloc is fresh
 * pages on every call, each faulted in. While one caller holds the slot, another (a thread)
 * gets its own from malloc; *held says which it was, for {KEPT_NAME}_done. */
static void *{KEPT_NAME}_buffers[{KEPT_SLOTS}];
static size_t {KEPT_NAME}_sizes[{KEPT_SLOTS}];
static int {KEPT_NAME}_taken[{KEPT_SLOTS}];

static void *{KEPT_NAME}(int slot, size_t bytes, int *held) {{
    if (bytes == 0) bytes = 1;
    *held = !__atomic_exchange_n(&{KEPT_NAME}_taken[slot], 1, __ATOMIC_ACQUIRE);
    if (!*held) return malloc(bytes);
    if ({KEPT_NAME}_sizes[slot] < bytes) {{
        free({KEPT_NAME}_buffers[slot]);
        {KEPT_NAME}_buffers[slot] = malloc(bytes);
        {KEPT_NAME}_sizes[slot] = {KEPT_NAME}_buffers[slot] != NULL ? bytes : 0;
    }}
    return {KEPT_NAME}_buffers[slot];
}}

static void {KEPT_NAME}_done(int slot, void *buffer, int held) {{
    if (held) {{
        __atomic_store_n(&{KEPT_NAME}_taken[slot], 0, __ATOMIC_RELEASE);
    }} else {{
        free(buffer);
    }}
}}
"""


@dataclass(frozen=True)
class _Allocation:
    call: Node  # `malloc(n)`
    pointer: str  # what it is assigned to
    frees: tuple[Node, ...]  # the `free(pointer)` calls
    function: Node


def _keep_buffers(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    if KEPT_NAME in identifiers(kernel.tree.root_node):
        _fail(strategy, None, "the kernel keeps its buffers already")
    sites = [site for function in kernel.functions for site in _freed_allocations(function)]
    if not sites:
        _fail(strategy, None, "no `p = malloc(n)` (or kope_alloc) whose p the kernel frees")
    if len(sites) > KEPT_SLOTS:
        _fail(strategy, None, f"{len(sites)} allocations, more than {KEPT_SLOTS} slots")
    held = f"{KEPT_NAME}_held"
    edits = []
    for slot, site in enumerate(sites):
        size = text(field(site.call, "arguments").named_children[0])  # type: ignore[union-attr]
        edits.append(replacement(site.call, f"{KEPT_NAME}({slot}, {size}, &{held}[{slot}])"))
        edits += [replacement(call, f"{KEPT_NAME}_done({slot}, {site.pointer}, {held}[{slot}])")
                  for call in site.frees]  # fmt: skip
    for function in {id(s.function): s.function for s in sites}.values():
        body = field(function, "body")
        assert body is not None  # _analyse found its loops in it
        edits.append(insertion(body.start_byte + 1, f"\n    int {held}[{len(sites)}] = {{0}};"))
    at = line_start(kernel.source, kernel.function.start_byte)
    return [*edits, insertion(at, KEPT_SOURCE + "\n")]


def _freed_allocations(function: Node) -> list[_Allocation]:
    """Each allocation assigned straight to a pointer the function frees, and only allocated
    there: `p = (T *)malloc(n);` or `T *p = malloc(n);`, then `free(p)`."""
    calls = {name: [c for c in walk(function) if _called(c) == name] for name in ("free",)}
    allocations = [c for c in walk(function) if _called(c) in ALLOCATORS]
    pointers = [_assigned_to(call) for call in allocations]
    found = []
    for call, pointer in zip(allocations, pointers, strict=True):
        if pointer is None or pointers.count(pointer) != 1:
            continue
        frees = tuple(c for c in calls["free"] if _only_argument(c) == pointer)
        if frees:
            found.append(_Allocation(call, pointer, frees, function))
    return found


def _called(node: Node) -> str | None:
    callee = field(node, "function") if node.type == "call_expression" else None
    return text(callee) if callee is not None and callee.type == "identifier" else None


def _only_argument(call: Node) -> str | None:
    arguments = field(call, "arguments")
    named = arguments.named_children if arguments is not None else []
    return text(named[0]) if len(named) == 1 and named[0].type == "identifier" else None


def _assigned_to(call: Node) -> str | None:
    """`p` in `p = (T *)call;` or `T *p = call;` (casts and parentheses between)."""
    node = call
    while node.parent is not None and node.parent.type in (
        "cast_expression",
        "parenthesized_expression",
    ):
        node = node.parent  # fmt: skip
    parent = node.parent
    if parent is None:
        return None
    if parent.type == "assignment_expression" and same(field(parent, "right"), node):
        left = field(parent, "left")
        return text(left) if left is not None and left.type == "identifier" else None
    if parent.type == "init_declarator" and same(field(parent, "value"), node):
        return declarator_name(parent)
    return None
