"""The OpenAPI document's shared parts: the one error shape, pagination, and the global hook.

Each API view documents its own request body, success response and the errors its
services can raise (`extend_schema(..., responses={201: Output, **errors(400, 409)})`).
What every operation shares is added once, by `postprocess`:

- 401 (with the bearer challenge header) on every operation that needs credentials,
- 403 on every operation that needs credentials: a token without a role, or a role
  that may not do this (`kiln.identity.permissions`),
- 400 on every operation that takes a body or query parameters (malformed JSON, a
  parameter out of range),
- 404 on every operation with a path parameter (an invisible object is a missing one),
- 429 when a throttle is configured,
- a tag per API area, from the path.

All of them reference one component, `Error`, the `{"code", "message", "extra"}` body
that `kiln.errors.api_exception_handler` renders.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers

from kiln import params

ERROR_REF = {"$ref": "#/components/schemas/Error"}

ERROR_DESCRIPTIONS = {
    400: "The request is invalid; `extra.fields` names each field or parameter and its problem.",
    401: "No credentials, or a token that was refused (the WWW-Authenticate header says why).",
    403: "The caller's roles or teams do not allow this.",
    404: "No such object, or one the caller may not see.",
    409: "The object's current state does not allow this (or it already exists).",
    415: "The body is not JSON.",
    422: "The Idempotency-Key was used before with a different body.",
    429: "Too many requests; retry after the time in the Retry-After header.",
    503: "A dependency (the cluster, the metrics server) is unavailable; retrying may help.",
}


@extend_schema_serializer(component_name="Error")
class ErrorSerializer(serializers.Serializer):
    """The one error body: a stable code, a human message and structured details."""

    code = serializers.CharField(help_text="Stable, machine-readable error code.")
    message = serializers.CharField(help_text="What went wrong, for a person.")
    extra = serializers.DictField(
        child=serializers.JSONField(),
        help_text="Details; `fields` maps each invalid field or parameter to its messages.",
    )


class TeamObjectOutput(serializers.Serializer):
    """The fields every response about an object a team owns in one namespace starts with."""

    id = serializers.UUIDField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    team = serializers.CharField(help_text="The owning team's slug.")


def errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """`responses={200: Out, **errors(404, 409)}`: these statuses answer the Error shape."""
    return {
        status: OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[status])
        for status in statuses
    }


def documented(field: serializers.Field, **schema: Any) -> serializers.Field:
    """Document JSON Schema keywords (limits a service enforces) on a field; parsing unchanged.

    For a rule kept where it belongs (a service, `portal.validation`) but that clients must
    see: `documented(StrictIntegerField(), minimum=1, maximum=MAX_CPU)`.
    """
    base = {
        serializers.BooleanField: {"type": "boolean"},
        serializers.IntegerField: {"type": "integer"},
        serializers.FloatField: {"type": "number"},
        serializers.CharField: {"type": "string"},
    }
    kind = next((v for k, v in base.items() if isinstance(field, k)), {})
    # A serializer deep-copies its fields by re-instantiating their class, so the annotation
    # goes on a subclass made for this one field, not on the instance.
    documented_class = type(field.__class__.__name__, (field.__class__,), {})
    extend_schema_field({**kind, **schema})(documented_class)
    field.__class__ = documented_class
    return field


# --- query parameters ---------------------------------------------------------------------

LIMIT = OpenApiParameter(
    "limit",
    {"type": "integer", "minimum": 1, "maximum": params.MAX_LIMIT},
    description=f"Page size, 1..{params.MAX_LIMIT} (default {params.DEFAULT_LIMIT}).",
    default=params.DEFAULT_LIMIT,
)
OFFSET = OpenApiParameter(
    "offset",
    {"type": "integer", "minimum": 0, "maximum": params.MAX_OFFSET},
    description="Rows to skip (default 0).",
    default=0,
)
PAGE_PARAMETERS = [LIMIT, OFFSET]

MOMENT_SCHEMA = {
    "anyOf": [
        {"type": "string", "format": "date"},
        {"type": "string", "format": "date-time"},
        {"type": "string", "maxLength": 0},  # empty: not set (an HTML form's blank field)
    ],
}


def moment_parameter(name: str, description: str) -> OpenApiParameter:
    """An ISO 8601 date (midnight UTC) or datetime query parameter (kiln.params.parse_moment)."""
    return OpenApiParameter(
        name, MOMENT_SCHEMA, description=f"{description}; {params.MOMENT_FORMS}."
    )


def text_parameter(
    name: str, description: str = "", *, max_length: int = params.MAX_TEXT_LENGTH
) -> OpenApiParameter:
    """A free-text filter (kiln.params.parse_text): at most `max_length` characters, no NUL."""
    return OpenApiParameter(
        name,
        {"type": "string", "maxLength": max_length, "pattern": "^[^\\u0000]*$"},
        description=description,
    )


def paginated(item: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """The page shape of `kiln.pagination.LimitOffsetPagination` around `item` rows."""

    @extend_schema_serializer(component_name=name)
    class Page(serializers.Serializer):
        count = serializers.IntegerField(min_value=0, help_text="Rows across all pages.")
        next = serializers.URLField(allow_null=True, help_text="The next page, or null.")
        previous = serializers.URLField(allow_null=True, help_text="The previous page, or null.")
        results = item(many=True)

    Page.__name__ = name
    return Page


# --- the global hook ----------------------------------------------------------------------

_TAGS = {
    "me": "identity",
    "teams": "identity",
    "environments": "environments",
    "canary": "canary",
    "rollouts": "canary",
    "chaos": "chaos",
    "audit": "audit",
}


ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "extra": {"type": "object", "additionalProperties": {}},
    },
    "required": ["code", "message", "extra"],
}


# Operations every authenticated caller may use, whatever their roles: no 403.
ANY_AUTHENTICATED = {"me_retrieve"}


def _error_response(status: int) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": ERROR_DESCRIPTIONS[status],
        "content": {"application/json": {"schema": ERROR_REF}},
    }
    if status == 401:
        response["headers"] = {
            "WWW-Authenticate": {
                "description": "The bearer challenge (RFC 6750), with the reason a token was refused.",
                "required": True,
                "schema": {"type": "string"},
            }
        }
    return response


def _throttled() -> bool:
    rest = getattr(settings, "REST_FRAMEWORK", {})
    return bool(rest.get("DEFAULT_THROTTLE_CLASSES"))


def postprocess(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict:
    """SPECTACULAR POSTPROCESSING_HOOKS entry: add the responses every operation shares."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("Error", ERROR_SCHEMA)  # views reference it; this keeps it if none does
    for path, operations in result.get("paths", {}).items():
        segment = path.removeprefix("/api/v1/").split("/", 1)[0]
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            operation["tags"] = [_TAGS.get(segment, segment)]
            responses = operation.setdefault("responses", {})
            shared: list[int] = []
            security = operation.get("security", [{}])
            if security and {} not in security:
                shared.append(401)
                if operation.get("operationId") not in ANY_AUTHENTICATED:
                    shared.append(403)
            has_query = any(p.get("in") == "query" for p in operation.get("parameters", []))
            if "requestBody" in operation or has_query:
                shared.append(400)
            if "requestBody" in operation:
                shared.append(415)
            if "{" in path:
                shared.append(404)
            if _throttled():
                shared.append(429)
            for status in shared:
                responses.setdefault(str(status), _error_response(status))
            operation["responses"] = dict(sorted(responses.items()))
    return result
