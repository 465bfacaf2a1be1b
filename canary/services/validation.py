"""Checks of what callers send the canary services: every refusal names its fields (400).

Each check returns field errors (`{field: [reason]}`) instead of raising, so a service
can collect every problem of a request and refuse it once, naming them all.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from canary.models import Arm
from canary.sequential import AnalysisConfig
from kiln.errors import InvalidInput
from kiln.params import real_number
from kiln.validators import DNS_LABEL

# AnalysisConfig fields a rollout may override; the horizon and tick length follow its steps.
CONFIG_KEYS = {f.name for f in dataclasses.fields(AnalysisConfig)} - {
    "horizon_ticks",
    "tick_seconds",
}
MAX_LATENCY_SAMPLES = 10_000
MAX_EXTENSION_TICKS = 10_000
# The longest max duration a rollout may set (`config.max_ticks`): a month of one-second ticks.
MAX_TICKS = 2_592_000
# How far ahead of the server's clock a pushed window may end: a clock a little fast is
# taken; a window dated next year would refuse every later window of its arm.
MAX_CLOCK_AHEAD = timedelta(minutes=5)

FieldErrors = dict[str, list[str]]


DNS_LABEL_WORDS = (
    "a DNS-1123 label: up to 63 lower-case letters, digits and '-', starting and ending with a "
    "letter or digit"
)


def dns_label_errors(**values: Any) -> FieldErrors:
    """`{field: [DNS_LABEL_WORDS]}` for each value that is not a DNS-1123 label."""
    errors: FieldErrors = {}
    for field, value in values.items():
        try:
            DNS_LABEL(value)
        except (ValidationError, TypeError):
            errors[field] = [DNS_LABEL_WORDS]
    return errors


def require_dns_labels(**values: Any) -> None:
    """InvalidInput (400) naming the first value that is not a DNS-1123 label."""
    for field in dns_label_errors(**values):
        raise InvalidInput(
            f"{field} must be a DNS-1123 label", extra={"fields": {field: [DNS_LABEL_WORDS]}}
        )


def rollout_errors(
    *, steps: Any, ticks_per_step: Any, tick_seconds: Any, config: Any
) -> FieldErrors:
    """What is wrong with a rollout's steps, tick settings and AnalysisConfig overrides."""
    errors: FieldErrors = {}
    if (
        not isinstance(steps, list)
        or len(steps) < 2
        or not all(isinstance(w, int) and not isinstance(w, bool) for w in steps)
    ):
        errors["steps"] = ["a list of at least two integer weights, e.g. [5, 25, 50, 100]"]
    elif steps != sorted(set(steps)) or steps[0] <= 0 or steps[-1] != 100:
        errors["steps"] = ["weights must increase strictly from above 0 and end at 100"]
    if not isinstance(ticks_per_step, int) or not 1 <= ticks_per_step <= 1000:
        errors["ticks_per_step"] = ["an integer from 1 to 1000"]
    seconds = real_number(tick_seconds)
    if seconds is None or not 0.2 <= seconds <= 3600:
        errors["tick_seconds"] = ["a number of seconds from 0.2 to 3600"]
    if not isinstance(config, dict):
        errors["config"] = ["an object of AnalysisConfig fields"]
    elif set(config) - CONFIG_KEYS:
        errors["config"] = [f"unknown fields: {', '.join(sorted(set(config) - CONFIG_KEYS))}"]
    elif isinstance(most := config.get("max_ticks"), int) and most > MAX_TICKS:
        errors["config"] = [f"max_ticks: at most {MAX_TICKS:,} ticks"]
        errors["config.max_ticks"] = [f"at most {MAX_TICKS:,} ticks"]
    return errors


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def observation_errors(
    *, arm: Any, requests: Any, errors: Any, latencies_ms: list[Any], observed_at: Any
) -> FieldErrors:
    """What is wrong with one arm's pushed window: counts, samples and the window's end."""
    fields: FieldErrors = {}
    if arm not in Arm.values:
        fields["arm"] = ["baseline or canary"]
    if not _count(requests):
        fields["requests"] = ["a non-negative integer"]
    if not _count(errors):
        fields["errors"] = ["a non-negative integer"]
    elif isinstance(requests, int) and errors > requests:
        fields["errors"] = ["cannot exceed requests"]
    if len(latencies_ms) > MAX_LATENCY_SAMPLES or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 1e9
        for v in latencies_ms
    ):
        fields["latencies_ms"] = [
            f"at most {MAX_LATENCY_SAMPLES} numbers of milliseconds, each from 0 to below 1e9"
        ]
    elif isinstance(requests, int) and len(latencies_ms) > requests:
        fields["latencies_ms"] = ["at most one latency sample per request"]
    if observed_at is not None and getattr(observed_at, "tzinfo", None) is None:
        fields["observed_at"] = ["a timezone-aware time"]
    elif observed_at is not None and observed_at > timezone.now() + MAX_CLOCK_AHEAD:
        fields["observed_at"] = ["at most five minutes ahead of the server's clock"]
    return fields


def required_reason(reason: str) -> str:
    """The reason a person gives for a decision, stripped; InvalidInput (400) when empty."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput(
            "a reason is required", extra={"fields": {"reason": ["say why, for the audit trail"]}}
        )
    return reason


def require_extension(ticks: Any) -> None:
    """InvalidInput (400) unless `ticks` is None (the default) or 1..MAX_EXTENSION_TICKS."""
    if ticks is not None and not (_count(ticks) and 1 <= ticks <= MAX_EXTENSION_TICKS):
        raise InvalidInput(
            f"ticks must be an integer from 1 to {MAX_EXTENSION_TICKS}",
            extra={"fields": {"ticks": [f"an integer from 1 to {MAX_EXTENSION_TICKS}"]}},
        )
