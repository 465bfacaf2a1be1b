"""Units a person reads on the scheduler page: cores rather than millicores, GiB rather than bytes."""

from __future__ import annotations

from django import template

register = template.Library()

GIB = 2**30


def _trim(value: float, places: int = 2) -> str:
    """`value` with at most `places` decimals and no trailing zeros (1.50 -> 1.5, 2.00 -> 2)."""
    text = f"{value:,.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


@register.filter
def cores(value: float | int | None) -> str:
    """Cores (a float) as "0.5 cores", "1 core"."""
    if value is None:
        return "–"
    text = _trim(float(value))
    return f"{text} core" if text == "1" else f"{text} cores"


@register.filter
def millicores(value: float | int | None) -> str:
    """Millicores as cores ("1,500" -> "1.5 cores")."""
    return "–" if value is None else cores(float(value) / 1000)


@register.filter
def gib(value: float | int | None) -> str:
    """Bytes as GiB ("26038239232" -> "24.25 GiB")."""
    return "–" if value is None else f"{_trim(float(value) / GIB)} GiB"


@register.filter
def resource_amount(value: float | int | None, resource: str) -> str:
    """An amount of a Workload Commitment resource in its readable unit: cpu in cores (from
    millicores), memory in GiB (from bytes), GPUs as a count."""
    if value is None:
        return "–"
    if resource == "cpu":
        return millicores(value)
    if resource == "memory":
        return gib(value)
    count = _trim(float(value))
    return f"{count} GPU" if count == "1" else f"{count} GPUs"


@register.filter
def per_hour(value: float | None) -> str:
    """Dollars per hour, to a tenth of a cent ("$0.192/h"); small amounts to four places."""
    if value is None:
        return "–"
    places = 3 if value >= 0.1 or value == 0 else 4
    return f"${value:.{places}f}/h"
