"""What pages share: one page of a long list (`?page=N`, the other query parameters kept),
and one moment of the database for a page drawn from several reads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.paginator import Page, Paginator
from django.db import connection, transaction
from django.http import HttpRequest

PER_PAGE = 50


def page_of(request: HttpRequest, items: Any, per_page: int = PER_PAGE) -> Page[Any]:
    """The requested page; a page number that is not a number is the first page, one past
    the end is the last (what a stale bookmark should show, rather than an error)."""
    return Paginator(items, per_page).get_page(request.GET.get("page"))


@contextmanager
def one_moment() -> Iterator[None]:
    """Every read inside sees the database as it was at the first one (PostgreSQL's repeatable
    read), so a page drawn from several queries while a session writes shows one moment of it.
    Inside a transaction already begun (a test's), the reads stay in that one."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield
