"""Parsing of query-string values: dates and datetimes, bounded integers, pagination, text.

Django-free, so the rules can be property-tested alone. Every parser takes the raw
string (or None when the parameter is absent) and returns a value in range or
raises `ParamError`, which names the parameter and what it accepts; nothing else
escapes. `kiln.errors` renders a ParamError as a 400 `{code, message, extra}`.

Ranges are the database's, not Python's: a datetime must survive conversion to
UTC inside Python's years 1..9999, an integer must fit the column it is compared
with (PostgreSQL `integer`/`bigint`), and text must not hold a NUL character,
which PostgreSQL refuses in every text value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

# Column ranges of Django's integer fields as PostgreSQL stores them (SQLite's are wider).
SMALLINT_MAX = 2**15 - 1
INT_MAX = 2**31 - 1
BIGINT_MAX = 2**63 - 1
INTEGER_COLUMN_RANGES: dict[str, tuple[int, int]] = {
    "SmallIntegerField": (-(2**15), SMALLINT_MAX),
    "PositiveSmallIntegerField": (0, SMALLINT_MAX),
    "IntegerField": (-(2**31), INT_MAX),
    "PositiveIntegerField": (0, INT_MAX),
    "AutoField": (1, INT_MAX),
    "BigIntegerField": (-(2**63), BIGINT_MAX),
    "PositiveBigIntegerField": (0, BIGINT_MAX),
    "BigAutoField": (1, BIGINT_MAX),
}

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# OFFSET beyond this is never a real page; it also keeps the value inside an `integer`.
MAX_OFFSET = INT_MAX
MAX_TEXT_LENGTH = 200
_MAX_MOMENT_LENGTH = 40  # the longest accepted form is 32 characters

_DATE = r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})"
_TIME = (
    r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})"
    r"(?::(?P<second>[0-9]{2})(?:[.,](?P<fraction>[0-9]{1,9}))?)?"
)
# A space stands for "+": an unencoded "+" in a query string arrives as a space.
_OFFSET = r"(?P<tz>Z|z|(?P<sign>[+\- ])(?P<tzhour>[0-9]{2})(?::?(?P<tzminute>[0-9]{2}))?)"
_MOMENT_RE = re.compile(rf"{_DATE}(?:[Tt ]{_TIME}{_OFFSET}?)?", re.ASCII)
_UNSIGNED_RE = re.compile(r"[0-9]+", re.ASCII)
_SIGNED_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)

MOMENT_FORMS = "an ISO 8601 date (YYYY-MM-DD) or datetime (YYYY-MM-DDTHH:MM[:SS[.f]][Z|±HH:MM])"


class ParamError(ValueError):
    """A query parameter that cannot be used: which one, why, and what it accepts."""

    def __init__(self, name: str, message: str, *, allowed: str = "") -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message
        self.allowed = allowed

    def as_extra(self) -> dict[str, Any]:
        """The `extra` of the 400: the parameter, its error as a field error, what it accepts."""
        extra: dict[str, Any] = {"parameter": self.name, "fields": {self.name: [self.message]}}
        if self.allowed:
            extra["allowed"] = self.allowed
        return extra


def _check_text(value: str, name: str, max_length: int) -> None:
    if len(value) > max_length:
        raise ParamError(
            name, f"is longer than {max_length} characters", allowed=f"≤{max_length} chars"
        )
    if "\x00" in value:
        raise ParamError(name, "must not contain NUL characters")
    if any("\ud800" <= ch <= "\udfff" for ch in value):
        raise ParamError(name, "must not contain unpaired surrogates")


def parse_text(value: str | None, name: str, *, max_length: int = MAX_TEXT_LENGTH) -> str:
    """A free-text filter, stripped; empty when absent. No NUL, at most `max_length` characters."""
    if value is None:
        return ""
    _check_text(value, name, max_length)
    return value.strip()


def parse_choice(value: str | None, name: str, choices: list[str]) -> str | None:
    """One of `choices`, or None when absent; anything else, the empty value too, is a 400."""
    if value is None:
        return None
    if value not in choices:
        raise ParamError(name, f"must be one of {', '.join(choices)}", allowed=", ".join(choices))
    return value


def parse_moment(value: str | None, name: str) -> datetime | None:
    """An aware UTC datetime from an ISO 8601 date or datetime; None when absent or empty.

    A date means its midnight UTC; a datetime without an offset is UTC. Impossible
    dates (2026-02-30), hours past 23, offsets of a day or more, and moments that
    leave years 1..9999 when converted to UTC (9999-12-31T23:59:59-14:00) are errors.
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > _MAX_MOMENT_LENGTH:
        raise ParamError(name, f"is not {MOMENT_FORMS}", allowed=MOMENT_FORMS)
    match = _MOMENT_RE.fullmatch(value.strip())
    if match is None:
        raise ParamError(name, f"is not {MOMENT_FORMS}", allowed=MOMENT_FORMS)
    g = match.groupdict()
    try:
        day = date(int(g["year"]), int(g["month"]), int(g["day"]))
    except ValueError as exc:
        raise ParamError(name, f"is not a calendar date ({exc})", allowed=MOMENT_FORMS) from exc
    if g["hour"] is None:
        return datetime(day.year, day.month, day.day, tzinfo=UTC)
    fraction = (g["fraction"] or "").ljust(6, "0")[:6]
    try:
        naive = datetime(
            day.year,
            day.month,
            day.day,
            int(g["hour"]),
            int(g["minute"]),
            int(g["second"] or 0),
            int(fraction or 0),
        )
    except ValueError as exc:
        raise ParamError(name, f"is not a time of day ({exc})", allowed=MOMENT_FORMS) from exc
    tz = UTC
    if g["sign"]:
        hours, minutes = int(g["tzhour"]), int(g["tzminute"] or 0)
        if hours > 23 or minutes > 59:
            raise ParamError(name, "has a UTC offset outside ±23:59", allowed=MOMENT_FORMS)
        offset = timedelta(hours=hours, minutes=minutes)
        tz = timezone(-offset if g["sign"] == "-" else offset)
    try:
        return naive.replace(tzinfo=tz).astimezone(UTC)
    except (OverflowError, ValueError) as exc:
        raise ParamError(
            name, "is outside years 1..9999 once converted to UTC", allowed=MOMENT_FORMS
        ) from exc


def parse_int(
    value: str | None,
    name: str,
    *,
    minimum: int,
    maximum: int,
    default: int | None = None,
) -> int | None:
    """A decimal integer in [minimum, maximum]; `default` when absent or empty.

    Only ASCII digits with an optional sign: no spaces, underscores, exponents or
    other scripts' digits (which Python's int() would accept).
    """
    if value is None or value == "":
        return default
    allowed = f"an integer from {minimum} to {maximum}"
    if not isinstance(value, str) or not _SIGNED_RE.fullmatch(value):
        raise ParamError(name, f"must be {allowed}", allowed=f"{minimum}..{maximum}")
    digits = value.lstrip("+-").lstrip("0")
    if len(digits) > len(str(max(abs(minimum), abs(maximum)))):
        raise ParamError(name, f"must be {allowed}", allowed=f"{minimum}..{maximum}")
    number = int(value)
    if not minimum <= number <= maximum:
        raise ParamError(name, f"must be {allowed}", allowed=f"{minimum}..{maximum}")
    return number


@dataclass(frozen=True)
class Page:
    """A validated page request: at most `limit` rows after skipping `offset`."""

    limit: int
    offset: int


def parse_limit(
    value: str | None,
    *,
    default: int = DEFAULT_LIMIT,
    maximum: int = MAX_LIMIT,
    name: str = "limit",
) -> int:
    """A page size in 1..maximum; `default` when absent."""
    result = parse_int(value, name, minimum=1, maximum=maximum, default=default)
    assert result is not None  # default is an int
    return result


def parse_offset(value: str | None, *, maximum: int = MAX_OFFSET, name: str = "offset") -> int:
    """Rows to skip, 0..maximum; 0 when absent."""
    result = parse_int(value, name, minimum=0, maximum=maximum, default=0)
    assert result is not None
    return result


def parse_page(
    limit: str | None,
    offset: str | None,
    *,
    default: int = DEFAULT_LIMIT,
    maximum: int = MAX_LIMIT,
) -> Page:
    """`limit` and `offset` together."""
    return Page(parse_limit(limit, default=default, maximum=maximum), parse_offset(offset))


def column_range(internal_type: str) -> tuple[int, int] | None:
    """The (min, max) an integer column of this Django field type holds; None if not integer."""
    return INTEGER_COLUMN_RANGES.get(internal_type)


MAX_JSON_DEPTH = 64


def real_number(value: Any) -> float | None:
    """A decoded JSON number as a finite float, or None: a bool, NaN, infinity, an integer
    beyond any float (10**400 decodes exactly, and float() of it raises) or a non-number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


# A UTF-16 surrogate the decoder could not pair ("\ud800" alone): legal JSON, but no UTF-8
# can encode it, so nothing that holds it can be stored or written back in an answer.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "must not contain NUL characters"
    if LONE_SURROGATE.search(text):
        return "must not contain unpaired UTF-16 surrogates (\\ud800-\\udfff)"
    return None


def json_problem(value: Any, depth: int = 0) -> str | None:
    """Why a decoded JSON value cannot be stored as is, or None: a NUL in a key or string
    (PostgreSQL's jsonb and text refuse it), an unpaired surrogate (UTF-8 cannot encode
    it), a non-finite number (1e400 decodes to inf, which JSON cannot encode back) or
    nesting deeper than MAX_JSON_DEPTH."""
    if depth > MAX_JSON_DEPTH:
        return f"is nested deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, float):
        return None if math.isfinite(value) else "must hold only finite numbers"
    if isinstance(value, str):
        return _text_problem(value)
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _text_problem(key) if isinstance(key, str) else None
            if problem:
                return problem
            problem = json_problem(item, depth + 1)
            if problem:
                return problem
    elif isinstance(value, list | tuple):
        for item in value:
            problem = json_problem(item, depth + 1)
            if problem:
                return problem
    return None
