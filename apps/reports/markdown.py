"""Text that people and agents wrote, put into Markdown so that it renders as the same text.

Exports are read in Markdown viewers that render HTML and links: a rule statement or a
session label must not become markup there, nor end its line and start a heading.
"""

from __future__ import annotations

import re

# Backslash first: the escapes after it add backslashes of their own. `*`, `_` and `~` would
# turn `__shared__` or `4*4*4` into bold, italics or strikethrough and drop the marks; a `#`
# that ends a heading's line would be taken for its closing sequence and dropped.
ESCAPES = [("\\", "\\\\"), ("&", "&amp;"), ("<", "&lt;"), ("[", "\\["), ("]", "\\]"),
           ("`", "\\`"), ("|", "\\|"), ("*", "\\*"), ("_", "\\_"), ("~", "\\~"),
           ("#", "\\#")]  # fmt: skip


def md_text(text: str) -> str:
    """One line of inline text: no HTML, link, code or table-cell syntax survives."""
    for plain, escaped in ESCAPES:
        text = text.replace(plain, escaped)
    return " ".join(text.splitlines())


def md_code(text: str) -> str:
    """One line as a code span, fenced by more backticks than it holds (nothing inside a
    code span is markup, and no escape works there)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {' '.join(text.splitlines())} {fence}"
