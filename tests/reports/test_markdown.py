"""Text people and agents wrote, in the Markdown exports, renders as that text in a real
Markdown renderer (markdown-it, CommonMark with HTML on, GFM tables): no markup, no link, no
line of its own."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.models import MemoryVector
from apps.memory.rules import Wording, rule_propose
from apps.reports.markdown import md_code, md_text
from apps.reports.services import export_request
from tests.factories import MembershipFactory

HOSTILE = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "[click](javascript:alert(1)) and ![x](http://example.com/x.png)",
    "<http://example.com> & &amp; &lt;",
    "a | b | c",
    "`code` and ``two``",
    "ends here\n## a heading\n- a list item\n\n<div>block</div>",
    "back\\slash \\[ \\` \\",
    "stage tiles in __shared__ memory, tile 4*4*4, *unroll* and ~~old~~ loads",
]


def rendered(markdown: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


def shown_text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup)).strip()


def one_line(text: str) -> str:
    return " ".join(text.splitlines())


@pytest.mark.parametrize("text", HOSTILE)
def test_text_renders_as_itself_in_one_paragraph(text: str) -> None:
    markup = rendered(f"Said: {md_text(text)}")

    assert re.fullmatch(r"<p>[^<]*</p>\n", markup), markup  # no element inside, one paragraph
    assert shown_text(markup) == f"Said: {one_line(text)}"


@pytest.mark.parametrize("text", ["use shared memory ##", "a #", "#"])
def test_a_heading_keeps_the_hashes_its_text_ends_with(text: str) -> None:
    markup = rendered(f"### Rule 1 v1: {md_text(text)}")

    assert shown_text(markup) == f"Rule 1 v1: {text}"


def test_a_table_cell_keeps_its_pipes_inside_it() -> None:
    row = ["a | b", "<b>c</b>", "d\ne"]
    markup = rendered("| x | y | z |\n|---|---|---|\n| " + " | ".join(map(md_text, row)) + " |\n")

    cells = re.findall(r"<td>(.*?)</td>", markup)
    assert [html.unescape(c) for c in cells] == ["a | b", "<b>c</b>", "d e"]


@pytest.mark.parametrize("text", ["case:12", "a`b", "``x``", "<b>x</b>\n# h"])
def test_a_code_span_holds_the_text_whatever_backticks_it_has(text: str) -> None:
    markup = rendered(f"Source: {md_code(text)}")

    [code] = re.findall(r"<code>(.*?)</code>", markup)
    assert html.unescape(code) == one_line(text)
    assert markup.count("<") == 4  # <p>, <code>, </code>, </p>


def test_a_knowledge_export_of_hostile_rules_is_only_its_own_structure(team: Team) -> None:
    source = "case:`<b>1</b>`"
    MemoryVector.objects.create(key=source, kind="case", text="x", value=0.5, team=team)
    rule_propose(team=team, source_key=source, evidence={"cases": [source]},
                 wording=Wording(HOSTILE[0] + "\n## fake", HOSTILE[2], HOSTILE[6]))  # fmt: skip
    viewer = MembershipFactory(team=team, role=Role.VIEWER).user

    export = export_request(team=team, user=viewer, kind="knowledge", fmt="md", params={})
    markup = rendered(bytes(export.content).decode())

    assert re.findall(r"<(h\d)>", markup) == ["h1", "h2", "h3"]  # title, status, the rule
    assert not re.search(r"<(script|img|a|div)\b", markup), markup
    assert "<script>alert(1)</script> ## fake" in shown_text(markup)
