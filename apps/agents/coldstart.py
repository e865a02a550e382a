"""The cold-start documents (apps/memory/coldstart) as COLD context items, most useful first,
each with its first section as the short form the assembler falls back to."""

from __future__ import annotations

from apps.agents.context import ContextItem, Tier
from apps.memory.coldstart import document_key, document_names, document_text, first_section


def cold_start_documents(target: str) -> list[ContextItem]:
    names = document_names(target)
    return [
        document_item(target, name, priority=float(len(names) - position))
        for position, name in enumerate(names)
    ]


def document_item(target: str, name: str, *, priority: float) -> ContextItem:
    text = document_text(target, name)
    return ContextItem(
        key=document_key(target, name),
        tier=Tier.COLD,
        text=text,
        short_text=first_section(text),
        priority=priority,
    )
