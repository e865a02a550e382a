"""One page of a long list on an HTML page: `?page=N`, with the other query parameters kept."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator
from django.http import HttpRequest

PER_PAGE = 50


def page_of(request: HttpRequest, items: Any, per_page: int = PER_PAGE) -> Page[Any]:
    """The requested page; a page number that is not a number is the first page, one past
    the end is the last (what a stale bookmark should show, rather than an error)."""
    return Paginator(items, per_page).get_page(request.GET.get("page"))
