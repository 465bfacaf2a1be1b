"""Request fields that take JSON types literally: a string field refuses numbers and booleans.

DRF's CharField turns `0` into `"0"`; the schema says `type: string`, so a number is a 400
like any other wrong type (what a client generated from the schema would never send).
"""

from __future__ import annotations

from typing import Any

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
