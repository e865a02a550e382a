"""Pages of the API's lists: django-ninja's limit and offset, where a page past the end is
empty however far past it is. PostgreSQL's OFFSET is a bigint: a larger one failed the query
("bigint out of range") and the request answered 500, for the lists sliced in the database."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja.pagination import LimitOffsetPagination

MAX_OFFSET = 2**63 - 1  # past the end of any table PostgreSQL can hold


class LimitOffset(LimitOffsetPagination):
    def paginate_queryset(
        self, queryset: Any, pagination: LimitOffsetPagination.Input, request: HttpRequest,
        **params: Any,
    ) -> Any:  # fmt: skip
        if pagination.offset > MAX_OFFSET:
            pagination = pagination.model_copy(update={"offset": MAX_OFFSET})
        return super().paginate_queryset(queryset, pagination, request, **params)
