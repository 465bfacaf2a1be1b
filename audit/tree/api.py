"""The transparency log's API: inclusion and consistency proofs and proof bundles (/api/v1/audit/...),
the checkpoint, witness cosignatures and tiles (/audit/tlog/..., C2SP tlog-tiles). Auditors only,
or anyone when KILN_AUDIT_TLOG_PUBLIC is on."""

from __future__ import annotations

import base64

from django.conf import settings
from django.http import HttpRequest, HttpResponse, QueryDict
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_serializer,
    extend_schema_view,
)
from rest_framework import serializers
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit import selectors, services
from audit.tree import merkle, serving
from audit.witness import selectors as witness_selectors
from kiln import params
from kiln.errors import InvalidInput, InvalidParameter, KilnError, NotFound, error_body
from kiln.identity.permissions import actor_from_request, can_view_audit
from kiln.openapi import errors

SEQ = {"type": "integer", "minimum": 1, "maximum": params.BIGINT_MAX}
TLOG_CACHE = "public, max-age=31536000, immutable"  # tiles and bundles never change (prefixes)
JSON = JSONRenderer()  # the API's renderer: the same bytes on either path of PublicTlogRead


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def _json(data: dict) -> HttpResponse:
    return HttpResponse(JSON.render(data), content_type="application/json")


def _seq_param(query: QueryDict, name: str, *, required: bool) -> int | None:
    value = params.parse_int(query.get(name), name, minimum=1, maximum=params.BIGINT_MAX)
    if value is None and required:
        raise InvalidInput(f"`{name}` is required", extra={"fields": {name: ["required"]}})
    return value


class TlogReader(BasePermission):
    """Auditors read the log's tiles and proofs; anyone does when KILN_AUDIT_TLOG_PUBLIC is on."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return settings.KILN_AUDIT_TLOG_PUBLIC or can_view_audit(actor_from_request(request))


class PublicTlogRead(APIView):
    """One of the log's hot reads (tiles, proofs), `answer`ed from the query and the URL's kwargs.

    When KILN_AUDIT_TLOG_PUBLIC is on a GET is answered from the request as it comes, beside
    Django's middleware (`fast_read`, kiln/fast_reads.py) or, reached through it, here:
    DRF's request wrapping, authentication, permission check and content negotiation decide
    nothing for an anonymous read of public bytes, and on these paths they were a sizeable share
    of each request's time. Otherwise (auditors only) DRF runs as for every API. Both paths give
    the same bytes, and errors the API's one shape (kiln.errors).
    """

    permission_classes = [TlogReader]

    def dispatch(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.method != "GET" or not settings.KILN_AUDIT_TLOG_PUBLIC:
            return super().dispatch(request, *args, **kwargs)
        return self.public_answer(request.GET, **kwargs)

    @classmethod
    def fast_read(cls, query: QueryDict, **kwargs) -> HttpResponse | None:
        """The public GET answered beside Django's middleware (kiln/fast_reads.py); None when
        the log is for auditors only, so Django authenticates the request as usual."""
        if not settings.KILN_AUDIT_TLOG_PUBLIC:
            return None
        return cls().public_answer(query, **kwargs)

    def public_answer(self, query: QueryDict, **kwargs) -> HttpResponse:
        """`answer`, with a refusal as the API's error shape."""
        try:
            return self.answer(query, **kwargs)
        except (KilnError, params.ParamError) as exc:
            if isinstance(exc, params.ParamError):
                exc = InvalidParameter.from_param(exc)
            response = _json(error_body(exc.code, exc.message, exc.extra))
            response.status_code = exc.http_status
            return response

    def get(self, request: Request, **kwargs) -> HttpResponse:
        """The auditors' path (or a public GET that reached DRF): `answer` from the query."""
        return self.answer(request.query_params, **kwargs)

    def answer(self, query: QueryDict, **kwargs) -> HttpResponse:
        """The route's response from its query; each subclass below defines it."""
        raise NotImplementedError


@extend_schema_serializer(component_name="AuditInclusionProof")
class InclusionProofOutput(serializers.Serializer):
    seq = serializers.IntegerField()
    index = serializers.IntegerField(help_text="Leaf index: seq - 1.")
    size = serializers.IntegerField()
    root = serializers.CharField(help_text="Merkle root at `size`, base64.")
    leaf_hash = serializers.CharField(help_text="SHA-256(0x00 || entry), base64.")
    proof = serializers.ListField(child=serializers.CharField(), help_text="base64 hashes.")
    checkpoint = serializers.CharField(
        allow_null=True, help_text="Signed note at `size`, with its witness cosignatures."
    )


@extend_schema_serializer(component_name="AuditConsistencyProof")
class ConsistencyProofOutput(serializers.Serializer):
    old_size = serializers.IntegerField()
    new_size = serializers.IntegerField()
    old_root = serializers.CharField()
    new_root = serializers.CharField()
    proof = serializers.ListField(child=serializers.CharField())


class ProofRead(PublicTlogRead):
    """A proof route: one required tree position and one optional (`positions`), each a chain
    seq or tree size from 1; `prove` answers from them."""

    positions: tuple[str, str]

    def answer(self, query: QueryDict) -> HttpResponse:
        needed, optional = self.positions
        return _json(
            self.prove(
                _seq_param(query, needed, required=True),
                _seq_param(query, optional, required=False),
            )
        )

    def prove(self, first: int, second: int | None) -> dict:
        """The proof, in its serializer's shape (which documents the schema)."""
        raise NotImplementedError


def _proof_route(operation_id: str, output: type, *meanings: str):
    """A ProofRead's schema: its positions (the class's `positions`) with their meanings."""

    def document(view: type[ProofRead]) -> type[ProofRead]:
        (needed, optional), (needed_doc, optional_doc) = view.positions, meanings
        return extend_schema_view(
            get=extend_schema(
                operation_id=operation_id,
                parameters=[
                    OpenApiParameter(needed, SEQ, required=True, description=needed_doc),
                    OpenApiParameter(optional, SEQ, description=optional_doc),
                ],
                responses={200: output, **errors(400)},
            )
        )(view)

    return document


@_proof_route(
    "audit_proof_inclusion",
    InclusionProofOutput,
    "Chain seq (from 1).",
    "Tree size (default: the whole tree).",
)
class AuditInclusionProofApi(ProofRead):
    """GET /api/v1/audit/proofs/inclusion?seq=N[&size=M]: RFC 9162 inclusion proof of entry N."""

    positions = ("seq", "size")

    def prove(self, first: int, second: int | None) -> dict:
        return serving.event_inclusion(seq=first, size=second)


@_proof_route(
    "audit_proof_consistency",
    ConsistencyProofOutput,
    "Older tree size.",
    "Newer tree size (default: the whole tree).",
)
class AuditConsistencyProofApi(ProofRead):
    """GET /api/v1/audit/proofs/consistency?from=A[&to=B]: RFC 9162 consistency proof A -> B."""

    positions = ("from", "to")

    def prove(self, first: int, second: int | None) -> dict:
        new, proof, old_root, new_root = serving.consistency_proof(old=first, new=second)
        return {"old_size": first, "new_size": new, "old_root": _b64(old_root),
                "new_root": _b64(new_root), "proof": [_b64(p) for p in proof]}  # fmt: skip


class AuditEventProofApi(APIView):
    """GET /api/v1/audit/events/<seq>/proof: an offline proof bundle for one entry."""

    permission_classes = [TlogReader]

    @extend_schema_serializer(component_name="AuditEventProofBundle")
    class OutputSerializer(InclusionProofOutput):
        entry = serializers.CharField(help_text="The canonical entry (RFC 8785 JSON) as hashed.")

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
        response = HttpResponse(
            selectors.cosigned_note(note), content_type="text/plain; charset=utf-8"
        )
        response["Cache-Control"] = "no-cache"
        return response


class TlogCosignatureApi(APIView):
    """POST /audit/tlog/cosignature: a witness's cosigned checkpoint in (C2SP tlog-cosignature).

    A witness posts without Kiln credentials: its Ed25519 cosignature by a key in
    KILN_AUDIT_WITNESSES is what authenticates it, checked before anything is stored.
    GET lists the stored cosignatures of the latest checkpoint (the log's readers).
    """

    permission_classes = [TlogReader]

    def get_permissions(self) -> list[BasePermission]:
        return [AllowAny()] if self.request.method == "POST" else super().get_permissions()

    @extend_schema(exclude=True)
    def get(self, request: Request) -> Response:
        head = witness_selectors.tree_head()
        rows = [
            {"witness": c.witness, "timestamp": c.timestamp, "line": c.line}
            for c in head["cosignatures"]
        ]
        size = head["checkpoint"].size if head["checkpoint"] else None
        return Response({"size": size, "cosignatures": rows})

    @extend_schema(exclude=True)
    def post(self, request: Request) -> Response:
        try:
            note = request.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput("the note is not UTF-8 text") from exc
        result = services.cosignature_add(note=note)
        return Response(
            {"size": result.size, "stored": result.stored, "already": result.already},
            status=201 if result.stored else 200,
        )


@extend_schema_view(get=extend_schema(exclude=True))
class TlogTileApi(PublicTlogRead):
    """GET /audit/tlog/tile/<L>/<N>[.p/<W>] and /audit/tlog/tile/entries/<N>[.p/<W>] (C2SP tlog-tiles)."""

    def answer(self, query: QueryDict, rest: str, level: int | None = None) -> HttpResponse:
        try:
            index, width = merkle.parse_tile_index(rest)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from exc
        if level is None:
            body = selectors.entry_bundle(index=index, width=width)
        elif level > 63:
            raise InvalidInput(f"tile level {level} is not in 0..63")
        else:
            body = serving.tile(level=level, index=index, width=width)
        response = HttpResponse(body, content_type="application/octet-stream")
        response["Cache-Control"] = TLOG_CACHE
        return response
