"""Audit API: chain entries (filters, cursor pagination), exports, and the transparency log's proofs
and tiles. Auditors only (tiles and proofs: publicly when KILN_AUDIT_TLOG_PUBLIC is on)."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, QueryDict, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit import merkle, selectors, services
from audit.chain import format_time
from audit.export import csv_lines, jsonl_lines
from audit.models import ChainEvent
from kiln import params
from kiln.errors import InvalidInput, NotFound
from kiln.identity.drf import IsAuditor
from kiln.identity.permissions import actor_from_request, can_view_audit
from kiln.openapi import LIMIT, errors, moment_parameter, text_parameter

MAX_LIMIT = params.MAX_LIMIT
STREAM_LINES = 500


async def stream_async(lines: Iterator[str]) -> AsyncIterator[str]:
    """Serve a sync line generator under ASGI in chunks, in one thread (its DB transaction
    spans the chunks), closing it if the client goes away."""
    iterator = iter(lines)

    def take() -> str:
        return "".join(itertools.islice(iterator, STREAM_LINES))

    take_async = sync_to_async(take, thread_sensitive=True)
    try:
        while chunk := await take_async():
            yield chunk
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            await sync_to_async(close, thread_sensitive=True)()


def filters_from(query: QueryDict) -> selectors.EventFilter:
    """Explorer/API filters from query parameters (`from`/`since`, `to`/`until`, actor, action,
    target); a bad value raises kiln.params.ParamError naming the parameter."""
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
    )


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

    class OutputSerializer(serializers.Serializer):
        results = ChainEventSerializer(many=True)
        next_cursor = serializers.CharField(allow_null=True)

        class Meta:
            ref_name = "ChainEventPage"

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
        segment = services.export_create(
            actor=actor_from_request(request), since=filters.since, until=filters.until, fmt=fmt
        )
        lines = jsonl_lines if fmt == "jsonl" else csv_lines
        content_type = "application/x-ndjson" if fmt == "jsonl" else "text/csv"
        content = lines(segment, filters.since, filters.until)
        if isinstance(request._request, ASGIRequest):
            content = stream_async(content)  # ASGI would otherwise buffer a sync iterator whole
        response = StreamingHttpResponse(content, content_type=content_type)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        response["Content-Disposition"] = f'attachment; filename="kiln-audit-{stamp}.{fmt}"'
        return response

    def perform_content_negotiation(self, request: Request, force: bool = False):
        # `format` selects jsonl/csv here, not a DRF renderer; errors still render as JSON.
        return super().perform_content_negotiation(request, force=True)


# --- the transparency log: proofs (/api/v1/audit/proofs/...) and tiles (/audit/tlog/...) ----

SEQ = {"type": "integer", "minimum": 1, "maximum": params.BIGINT_MAX}
TLOG_CACHE = "public, max-age=31536000, immutable"  # tiles and bundles never change (prefixes)


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def _seq_param(query: QueryDict, name: str, *, required: bool) -> int | None:
    value = params.parse_int(query.get(name), name, minimum=1, maximum=params.BIGINT_MAX)
    if value is None and required:
        raise InvalidInput(f"`{name}` is required", extra={"fields": {name: ["required"]}})
    return value


class TlogReader(BasePermission):
    """Auditors read the log's tiles and proofs; anyone does when KILN_AUDIT_TLOG_PUBLIC is on."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return settings.KILN_AUDIT_TLOG_PUBLIC or can_view_audit(actor_from_request(request))


class AuditInclusionProofApi(APIView):
    """GET /api/v1/audit/proofs/inclusion?seq=N[&size=M]: RFC 9162 inclusion proof of entry N."""

    permission_classes = [TlogReader]

    class OutputSerializer(serializers.Serializer):
        seq = serializers.IntegerField()
        index = serializers.IntegerField(help_text="Leaf index: seq - 1.")
        size = serializers.IntegerField()
        root = serializers.CharField(help_text="Merkle root at `size`, base64.")
        leaf_hash = serializers.CharField(help_text="SHA-256(0x00 || entry), base64.")
        proof = serializers.ListField(child=serializers.CharField(), help_text="base64 hashes.")
        checkpoint = serializers.CharField(allow_null=True, help_text="Signed note at `size`.")

        class Meta:
            ref_name = "AuditInclusionProof"

    @extend_schema(
        operation_id="audit_proof_inclusion",
        parameters=[
            OpenApiParameter("seq", SEQ, required=True, description="Chain seq (from 1)."),
            OpenApiParameter("size", SEQ, description="Tree size (default: the whole tree)."),
        ],
        responses={200: OutputSerializer, **errors(400)},
    )
    def get(self, request: Request) -> Response:
        seq = _seq_param(request.query_params, "seq", required=True)
        size = _seq_param(request.query_params, "size", required=False)
        proof = selectors.event_inclusion(seq=seq, size=size)
        return Response(self.OutputSerializer(proof).data)


class AuditConsistencyProofApi(APIView):
    """GET /api/v1/audit/proofs/consistency?from=A[&to=B]: RFC 9162 consistency proof A -> B."""

    permission_classes = [TlogReader]

    class OutputSerializer(serializers.Serializer):
        old_size = serializers.IntegerField()
        new_size = serializers.IntegerField()
        old_root = serializers.CharField()
        new_root = serializers.CharField()
        proof = serializers.ListField(child=serializers.CharField())

        class Meta:
            ref_name = "AuditConsistencyProof"

    @extend_schema(
        operation_id="audit_proof_consistency",
        parameters=[
            OpenApiParameter("from", SEQ, required=True, description="Older tree size."),
            OpenApiParameter("to", SEQ, description="Newer tree size (default: the whole tree)."),
        ],
        responses={200: OutputSerializer, **errors(400)},
    )
    def get(self, request: Request) -> Response:
        old = _seq_param(request.query_params, "from", required=True)
        new = _seq_param(request.query_params, "to", required=False)
        new, proof, old_root, new_root = selectors.consistency_proof(old=old, new=new)
        out = {"old_size": old, "new_size": new, "old_root": _b64(old_root),
               "new_root": _b64(new_root), "proof": [_b64(p) for p in proof]}  # fmt: skip
        return Response(self.OutputSerializer(out).data)


class AuditEventProofApi(APIView):
    """GET /api/v1/audit/events/<seq>/proof: an offline proof bundle for one entry."""

    permission_classes = [TlogReader]

    class OutputSerializer(AuditInclusionProofApi.OutputSerializer):
        entry = serializers.CharField(help_text="The canonical entry (RFC 8785 JSON) as hashed.")

        class Meta:
            ref_name = "AuditEventProofBundle"

    @extend_schema(
        operation_id="audit_event_proof", responses={200: OutputSerializer, **errors(404)}
    )
    def get(self, request: Request, seq: int) -> Response:
        bundle = selectors.event_proof_bundle(seq=seq)
        response = Response(self.OutputSerializer(bundle).data)
        response["Content-Disposition"] = f'attachment; filename="kiln-audit-proof-{seq}.json"'
        return response


class TlogCheckpointApi(APIView):
    """GET /audit/tlog/checkpoint: the latest signed checkpoint (C2SP tlog-checkpoint note)."""

    permission_classes = [TlogReader]

    @extend_schema(exclude=True)
    def get(self, request: Request) -> HttpResponse:
        note = selectors.latest_tree_checkpoint()
        if note is None:
            raise NotFound("no checkpoint with a tree root has been signed yet")
        response = HttpResponse(note.note, content_type="text/plain; charset=utf-8")
        response["Cache-Control"] = "no-cache"
        return response


class TlogTileApi(APIView):
    """GET /audit/tlog/tile/<L>/<N>[.p/<W>] and /audit/tlog/tile/entries/<N>[.p/<W>] (C2SP tlog-tiles)."""

    permission_classes = [TlogReader]

    @extend_schema(exclude=True)
    def get(self, request: Request, rest: str, level: int | None = None) -> HttpResponse:
        try:
            index, width = merkle.parse_tile_index(rest)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from exc
        if level is None:
            body = selectors.entry_bundle(index=index, width=width)
        elif level > 63:
            raise InvalidInput(f"tile level {level} is not in 0..63")
        else:
            body = selectors.tile_hashes(level=level, index=index, width=width)
        response = HttpResponse(body, content_type="application/octet-stream")
        response["Cache-Control"] = TLOG_CACHE
        return response
