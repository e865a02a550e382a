"""Pages of the API's lists: django-ninja's limit and offset, with an offset the database can
take. PostgreSQL's OFFSET is a bigint: a larger one failed the query ("bigint out of range")
and the request answered 500; it is now refused (422) naming the field."""

from __future__ import annotations

from ninja.pagination import LimitOffsetPagination
from pydantic import Field

MAX_OFFSET = 2**63 - 1


class LimitOffset(LimitOffsetPagination):
    class Input(LimitOffsetPagination.Input):
        offset: int = Field(0, ge=0, le=MAX_OFFSET)
