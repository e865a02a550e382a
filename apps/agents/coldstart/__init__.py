"""Cold-start documents: what an agent reads about a target before it has any experience.

SAGE's cold-start set, one folder of Markdown files per target. Each document becomes a COLD
context item whose short form is its first section (title, introduction and the first `##`
section, which every document keeps as a self-contained summary).
"""

from __future__ import annotations

from importlib import resources

from apps.agents.context import ContextItem, Tier

# Per target, its documents in the order they matter, most useful first.
DOCUMENTS = {
    "cpu-c": ("cheatsheet", "debugging", "examples"),
    "triton": ("cheatsheet", "debugging", "examples"),
    "cuda": ("cheatsheet", "debugging", "examples"),
}


def cold_start_documents(target: str) -> list[ContextItem]:
    names = DOCUMENTS.get(target)
    if names is None:
        known = ", ".join(sorted(DOCUMENTS))
        raise ValueError(f"no cold-start documents for target {target!r} (known: {known})")
    return [
        document_item(target, name, priority=float(len(names) - position))
        for position, name in enumerate(names)
    ]


def document_item(target: str, name: str, *, priority: float) -> ContextItem:
    text = document_text(target, name)
    return ContextItem(
        key=f"doc:{target}:{name}",
        tier=Tier.COLD,
        text=text,
        short_text=first_section(text),
        priority=priority,
    )


def document_text(target: str, name: str) -> str:
    return resources.files(__name__).joinpath(target, f"{name}.md").read_text(encoding="utf-8")


def first_section(markdown: str) -> str:
    """Everything before the second `## ` heading (headings inside code fences don't count)."""
    lines = markdown.splitlines(keepends=True)
    in_fence = False
    sections_seen = 0
    for position, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("## "):
            sections_seen += 1
            if sections_seen == 2:
                return "".join(lines[:position]).rstrip() + "\n"
    return markdown
