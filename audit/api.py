"""Audit API: chain entries (filters, cursor pagination) and exports, for auditors. The transparency
log's proofs and tiles are audit/tree/api.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from django.http import QueryDict, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit import selectors, services
from audit.chain import format_time
from audit.export.lines import csv_lines, jsonl_lines
from audit.models import ChainEvent
from kiln import params
from kiln.errors import InvalidInput
from kiln.identity.drf import IsAuditor
from kiln.identity.permissions import actor_from_request
from kiln.openapi import LIMIT, moment_parameter, text_parameter

MAX_LIMIT = params.MAX_LIMIT


def filters_from(query: QueryDict) -> selectors.EventFilter:
    """Explorer/API filters from query parameters (`from`/`since`, `to`/`until`, actor, action,
    target, who); a bad value raises kiln.params.ParamError (or InvalidInput) naming it."""
    since_name = "from" if query.get("from") else "since"
    until_name = "to" if query.get("to") else "until"
    since = params.parse_moment(query.get(since_name), since_name)
    until = params.parse_moment(query.get(until_name), until_name)
    if since and until and since >= until:
        raise InvalidInput(
            "`from` must be before `to`",
            extra={"fields": {since_name: [f"must be before `{until_name}`"]}},
        )
    return selectors.EventFilter(
        since=since,
        until=until,
        actor=params.parse_text(query.get("actor"), "actor"),
        action=params.parse_text(query.get("action"), "action"),
        target=params.parse_text(query.get("target"), "target", max_length=300),
        who=_who(query.get("who")),
    )


def _who(raw: str | None) -> str:
    """`who`: `people`, `system` or empty (both); anything else is refused naming the choices."""
    value = (raw or "").strip()
    if value in ("", "all"):
        return ""
    if value not in selectors.WHO_CHOICES:
        raise InvalidInput(
            "`who` must be people, system or all",
            extra={"fields": {"who": ["must be one of: people, system, all"]}},
        )
    return value


class ChainEventSerializer(serializers.ModelSerializer):
    """A chain entry as the API shows it (`data` as JSON, `recorded_at` as hashed)."""

    data = serializers.SerializerMethodField()
    event_id = serializers.CharField()
    recorded_at = serializers.SerializerMethodField()

    class Meta:
        model = ChainEvent
        fields = [
            "seq",
            "event_id",
            "recorded_at",
            "actor",
            "action",
            "target",
            "data",
            "trace_id",
            "prev_hash",
            "hash",
        ]

    @extend_schema_field({"type": "object", "additionalProperties": {}})
    def get_data(self, obj: ChainEvent) -> dict:
        return json.loads(obj.data)

    @extend_schema_field(OpenApiTypes.DATETIME)
    def get_recorded_at(self, obj: ChainEvent) -> str:
        return format_time(obj.recorded_at)


FILTER_PARAMS = [
    moment_parameter("from", "Recorded at or after (alias `since`)"),
    moment_parameter("to", "Recorded before (alias `until`)"),
    text_parameter("actor"),
    text_parameter("action", "Exact, or a prefix ending in '.'"),
    text_parameter("target", max_length=300),
    OpenApiParameter(
        "who",
        {"type": "string", "enum": ["people", "system", "all"]},
        description="People only, system components (`system:<component>`) only, or all.",
    ),
]
EXPORT_FILE = OpenApiParameter(
    "Content-Disposition",
    str,
    OpenApiParameter.HEADER,
    required=True,
    description='attachment; filename="kiln-audit-<UTC stamp>.<format>"',
    response=[200],
)


class AuditEventListApi(APIView):
    """GET /api/v1/audit/events/: chain entries, newest first, by opaque cursor."""

    permission_classes = [IsAuditor]

    @extend_schema_serializer(component_name="ChainEventPage")
    class OutputSerializer(serializers.Serializer):
        results = ChainEventSerializer(many=True)
        next_cursor = serializers.CharField(allow_null=True)

    @extend_schema(
        operation_id="audit_events_list",
        parameters=[
            *FILTER_PARAMS,
            OpenApiParameter(
                "cursor",
                {"type": "string", "maxLength": selectors.MAX_CURSOR_LENGTH},
                description="`next_cursor` of the previous page.",
            ),
            LIMIT,
        ],
        responses=OutputSerializer,
    )
    def get(self, request: Request) -> Response:
        filters = filters_from(request.query_params)
        limit = params.parse_limit(request.query_params.get("limit"), maximum=MAX_LIMIT)
        before = selectors.decode_cursor(request.query_params.get("cursor"))
        rows, next_seq = selectors.event_page(filters, before=before, limit=limit)
        page = {"results": rows, "next_cursor": selectors.encode_cursor(next_seq)}
        return Response(self.OutputSerializer(page).data)


class AuditExportApi(APIView):
    """GET /api/v1/audit/export?from=&to=[&format=csv]: a streamed, offline-verifiable export."""

    permission_classes = [IsAuditor]

    @extend_schema(
        operation_id="audit_export",
        parameters=[
            *FILTER_PARAMS[:2],
            OpenApiParameter("format", str, enum=["jsonl", "csv"], default="jsonl"),
            OpenApiParameter(
                "proofs",
                str,
                enum=["0", "1"],
                default="0",
                description="1: each entry's inclusion proof in the last signed tree (jsonl only).",
            ),  # fmt: skip
            EXPORT_FILE,
        ],
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(
                OpenApiTypes.STR,
                description="JSON lines: a header, the entries, their checkpoints.",
            ),
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="`format=csv`."),
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        filters = filters_from(request.query_params)
        fmt = request.query_params.get("format", "jsonl")
        if fmt not in ("jsonl", "csv"):
            raise InvalidInput(
                "format must be jsonl or csv", extra={"fields": {"format": ["jsonl or csv"]}}
            )
        proofs = request.query_params.get("proofs", "0")
        if proofs not in ("0", "1") or (proofs == "1" and fmt != "jsonl"):
            raise InvalidInput(
                "proofs must be 0 or 1, and 1 needs format=jsonl",
                extra={"fields": {"proofs": ["0, or 1 with format=jsonl"]}},
            )
        proofs = proofs == "1"
        segment = services.export_create(
            actor=actor_from_request(request), since=filters.since, until=filters.until, fmt=fmt
        )
        content_type = "application/x-ndjson" if fmt == "jsonl" else "text/csv"
        # Under ASGI kiln.streaming serves the lines in chunks from this request's thread.
        if fmt == "jsonl":
            content = jsonl_lines(segment, filters.since, filters.until, proofs=proofs)
        else:
            content = csv_lines(segment, filters.since, filters.until)
        response = StreamingHttpResponse(content, content_type=content_type)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        response["Content-Disposition"] = f'attachment; filename="kiln-audit-{stamp}.{fmt}"'
        return response

    def perform_content_negotiation(self, request: Request, force: bool = False):
        # `format` selects jsonl/csv here, not a DRF renderer; errors still render as JSON.
        return super().perform_content_negotiation(request, force=True)
