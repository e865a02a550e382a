"""Kernel source as highlighted HTML for the pages (styles: `.code` in static/css/app.css)."""

from __future__ import annotations

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CLexer


def c_code_html(source: str) -> str:
    """Pygments escapes the code, so agent-written source is safe to mark `|safe`."""
    return str(highlight(source, CLexer(), HtmlFormatter(cssclass="code")))
