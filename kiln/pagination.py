"""The API's one pagination: `limit` (1..500, default 50) and `offset`, parsed by kiln.params."""

from __future__ import annotations

from rest_framework import pagination

from kiln import params


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    """DRF's limit/offset pagination whose bad values are a 400 naming the parameter.

    DRF's own silently falls back to the default on a malformed value and passes a huge
    one to the database (a 500 when it overflows the column); here both are refused.
    """

    default_limit = params.DEFAULT_LIMIT
    max_limit = params.MAX_LIMIT

    def get_limit(self, request) -> int:
        return params.parse_limit(
            request.query_params.get(self.limit_query_param),
            default=self.default_limit,
            maximum=self.max_limit,
            name=self.limit_query_param,
        )

    def get_offset(self, request) -> int:
        return params.parse_offset(
            request.query_params.get(self.offset_query_param), name=self.offset_query_param
        )
