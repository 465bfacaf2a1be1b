"""Request bodies as the schema says them: fields that take JSON types literally, and
serializers that refuse fields they do not know.

DRF's CharField turns `0` into `"0"`; the schema says `type: string`, so a number is a 400
like any other wrong type (what a client generated from the schema would never send). DRF
drops a field it does not know; a `StrictSerializer` answers 400 naming it (a typo such as
`ttl_hour` is not silently the default), and documents `additionalProperties: false`.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers


class _StrictString:
    """Refuse a non-string JSON value before DRF coerces it."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictCharField(_StrictString, serializers.CharField):
    """A CharField whose value must be a JSON string."""


class StrictSlugField(_StrictString, serializers.SlugField):
    """A SlugField whose value must be a JSON string."""


class StrictURLField(_StrictString, serializers.URLField):
    """A URLField whose value must be a JSON string."""


class StrictSerializer(serializers.Serializer):
    """Rejects fields it does not know (a typo is a 400, not silently ignored), in the same
    response as every other field's error."""

    def to_internal_value(self, data: Any) -> Any:
        unknown = {}
        if isinstance(data, dict):
            unknown = {name: ["Unknown field."] for name in sorted(set(data) - set(self.fields))}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **unknown}) from exc
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value

    @classmethod
    def validated(cls, request: Any) -> dict[str, Any]:
        """The request body's fields, validated: a 400 naming every bad field otherwise."""
        body = cls(data=request.data)
        body.is_valid(raise_exception=True)
        return dict(body.validated_data)


class StrictSerializerSchema(OpenApiSerializerExtension):
    """A StrictSerializer's request body is documented with `additionalProperties: false`."""

    target_class = StrictSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """The serializer's own schema, closed to other properties in the request direction."""
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["additionalProperties"] = False
        return schema
