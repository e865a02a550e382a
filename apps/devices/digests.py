"""The key a kernel source is stored under, computed without the database: the journal names a
source by it, and a policy tells kernels apart by it (apps/agents/policy.py's kernel_key)."""

from __future__ import annotations

import hashlib


def source_digest(text: str) -> str:
    """The sha256 of a source's text (a lone surrogate kept as it is, not refused)."""
    return hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()
