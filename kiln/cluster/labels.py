"""Kubernetes label syntax (pure): what a label key and value may be, as the API server checks
them, so a selector Kiln stores is one the cluster would accept.

A key is an optional DNS-subdomain prefix and `/`, then a name of 1-63 characters; a value is
at most 63 characters. Names and values are alphanumerics with `-`, `_` and `.` inside.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def key_problem(key: str) -> str | None:
    """Why `key` is not a label key, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and _SUBDOMAIN.fullmatch(prefix)):
        return f"label key {key!r}: its prefix must be a DNS subdomain"
    if not (len(name) <= 63 and _NAME.fullmatch(name)):
        return (
            f"label key {key!r}: 1 to 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def value_problem(key: str, value: str) -> str | None:
    """Why `value` is not a (non-empty) label value, or None."""
    if not (len(value) <= 63 and _NAME.fullmatch(value)):
        return (
            f"label {key}={value!r}: the value is 1 to 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def selector_problem(selector: Any) -> str | None:
    """Why `selector` is not a non-empty matchLabels of valid keys and values, or None."""
    if not isinstance(selector, Mapping) or not selector:
        return "non-empty matchLabels (string keys and values): never the whole namespace"
    for key, value in selector.items():
        if not isinstance(key, str) or not isinstance(value, str):
            return "non-empty matchLabels (string keys and values): never the whole namespace"
        problem = key_problem(key) or value_problem(key, value)
        if problem:
            return problem
    return None
