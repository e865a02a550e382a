"""The cold-start documents in the knowledge base: one shared (team-less) memory vector per
document, keyed as the context keys them ("doc:cpu-c:cheatsheet"), so search finds them."""

from __future__ import annotations

from pathlib import Path

from apps.memory.coldstart import DOCUMENTS, document_key, document_text, first_section
from apps.memory.embeddings import model_version
from apps.memory.knowledge import document_vector_store
from apps.memory.models import MemoryVector

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[2]


def cold_start_vectors_store() -> list[MemoryVector]:
    """Every target's documents; idempotent (a document is embedded again only when its text
    or the embedding model changed)."""
    stored = []
    for target, names in DOCUMENTS.items():
        for name in names:
            text = document_text(target, name)
            key = document_key(target, name)
            stored.append(document_vector_store(key=key, text=text, summary=first_section(text),
                                                target=target))  # fmt: skip
    return stored


def document_origin(key: str) -> str | None:
    """The file a cold-start document's key comes from, relative to the repository; None for
    a key that names no cold-start document."""
    prefix, _, rest = key.partition(":")
    target, _, name = rest.partition(":")
    if prefix != "doc" or name not in DOCUMENTS.get(target, ()):
        return None
    return str((PACKAGE_DIR / target / f"{name}.md").relative_to(REPO_ROOT))


def cold_start_vectors_stale() -> bool:
    """Whether some document is missing from the knowledge base or embedded from an older text
    or model (a cheap check: it loads no model)."""
    version = model_version()
    current = {
        key: (text, model)
        for key, text, model in MemoryVector.objects.filter(
            kind=MemoryVector.Kind.DOCUMENT, team__isnull=True, embedding__isnull=False
        ).values_list("key", "text", "model_version")
    }
    return any(
        current.get(document_key(target, name)) != (document_text(target, name), version)
        for target, names in DOCUMENTS.items()
        for name in names
    )
