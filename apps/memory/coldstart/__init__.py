"""Cold-start documents: what an agent reads about a target before it has any experience.

SAGE's cold-start set and KOPE's cold tier, one folder of Markdown files per target. Memory keeps
them (here) and stores each in the knowledge base as a shared memory vector (`vectors`); the
agent's context admits each as a COLD item whose short form is its first section (title,
introduction and the first `##` section, which every document keeps as a self-contained
summary): apps/agents/coldstart.py.
"""

from __future__ import annotations

from importlib import resources

# Per target, its documents in the order they matter, most useful first.
DOCUMENTS = {
    "cpu-c": ("cheatsheet", "debugging", "examples"),
    "triton": ("cheatsheet", "debugging", "examples"),
    "cuda": ("cheatsheet", "debugging", "examples"),
}


def document_names(target: str) -> tuple[str, ...]:
    names = DOCUMENTS.get(target)
    if names is None:
        known = ", ".join(sorted(DOCUMENTS))
        raise ValueError(f"no cold-start documents for target {target!r} (known: {known})")
    return names


def document_key(target: str, name: str) -> str:
    return f"doc:{target}:{name}"


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
