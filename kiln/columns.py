"""What a model's columns can store, checked before a service writes (a 400, not a 500).

A value the database cannot hold fails only at INSERT/UPDATE, as a DataError (PostgreSQL:
"integer out of range", "invalid byte sequence", a NUL in text) or an OverflowError
(SQLite past 64 bits). Services call `check_columns(Model, values)` with what a client sent,
so such a value is a field error naming the field and its range instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import models

from kiln.errors import InvalidInput
from kiln.params import column_range, json_problem


def field_problem(field: models.Field, value: Any) -> str | None:
    """Why `field`'s column cannot store `value`, or None (None and unknown types pass)."""
    if value is None:
        return None
    bounds = column_range(field.get_internal_type())
    if bounds is not None:
        if isinstance(value, bool) or not isinstance(value, int):
            return None  # type errors are the serializer's and the service's own message
        low, high = bounds
        if not low <= value <= high:
            return f"must be an integer from {low} to {high}"
        return None
    if isinstance(field, models.FloatField) and isinstance(value, float):
        return None if math.isfinite(value) else "must be a finite number"
    if isinstance(field, models.CharField | models.TextField) and isinstance(value, str):
        if "\x00" in value:
            return "must not contain NUL characters"
        if field.max_length is not None and len(value) > field.max_length:
            return f"at most {field.max_length} characters"
        return None
    if isinstance(field, models.JSONField):
        problem = json_problem(value)
        if problem is None:
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                problem = "must be plain JSON"
        return problem
    return None


def column_errors(model: type[models.Model], values: Mapping[str, Any]) -> dict[str, list[str]]:
    """Field errors for the `values` (by field name) that `model`'s columns cannot store."""
    errors: dict[str, list[str]] = {}
    for name, value in values.items():
        try:
            field = model._meta.get_field(name)
        except FieldDoesNotExist:
            continue  # not a column of this model: nothing to check here
        problem = field_problem(field, value)
        if problem:
            errors[name] = [problem]
    return errors


def check_columns(model: type[models.Model], values: Mapping[str, Any]) -> None:
    """Raise InvalidInput (400, `extra.fields`) if any value does not fit its column."""
    errors = column_errors(model, values)
    if errors:
        raise InvalidInput(
            f"{', '.join(sorted(errors))}: out of range for what Kiln stores",
            extra={"fields": errors},
        )
