"""Hours an environment was up: ready until deleted (or now), less the hours it slept; and
their price, the hours asleep priced at what sleeping keeps (`environment_priced`).

An environment records each sleep as a `[asleep_from, awake_from]` pair of ISO timestamps
(`Environment.sleeps`; the last one open, `None`, while it sleeps; closed as its wake begins,
for its nodes come back then): the estimate of what it spends counts the hours it ran, as the
budget's forecast does. `periods` reads the pairs once; a pair that does not read as two
aware times (an open end aside) is passed over rather than fail a page. Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

HOURS = Decimal("0.01")
Period = tuple[datetime, datetime | None]


def _aware(text: Any) -> datetime | None:
    try:
        when = datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return when if when is not None and when.tzinfo is not None else None


def periods(sleeps: Any) -> list[Period]:
    """The sleeps as (start, end or None) times, the unreadable ones left out."""
    out: list[Period] = []
    for pair in sleeps if isinstance(sleeps, list) else ():
        if not isinstance(pair, list | tuple) or not pair:
            continue
        start = _aware(pair[0])
        stop = _aware(pair[1]) if len(pair) > 1 and pair[1] is not None else None
        if start is not None and (stop is not None or len(pair) < 2 or pair[1] is None):
            out.append((start, stop))
    return out


def _seconds(begin: datetime, end: datetime) -> float:
    return max((end - begin).total_seconds(), 0.0)


def asleep_seconds(slept: Sequence[Period], begin: datetime, end: datetime) -> float:
    """Seconds of [begin, end) spent asleep (an open sleep lasts until `end`)."""
    return sum(_seconds(max(start, begin), min(stop or end, end)) for start, stop in slept)


def _window(
    ready_at: datetime, gone_at: datetime | None, now: datetime, begin, end
) -> tuple[datetime, datetime]:
    start = max(ready_at, begin) if begin else ready_at
    stop = min(gone_at or now, end) if end else gone_at or now
    return start, stop


def up_hours(
    *,
    ready_at: datetime,
    gone_at: datetime | None,
    slept: Sequence[Period],
    now: datetime,
    begin: datetime | None = None,
    end: datetime | None = None,
) -> Decimal:
    """Hours within [begin, end) (the whole life by default) the environment was ready and
    awake: from ready until deleted (or now), less its sleeps (`periods`)."""
    start, stop = _window(ready_at, gone_at, now, begin, end)
    if stop <= start:
        return Decimal("0.00")
    seconds = _seconds(start, stop) - asleep_seconds(slept, start, stop)
    return Decimal(max(seconds, 0.0) / 3600).quantize(HOURS)


@dataclass(frozen=True)
class Priced:
    """An environment's hours in a window and their estimated price (unrounded: totals add
    these and round once): its hourly price for the hours it was up and awake, and its asleep
    price (what sleeping keeps, the database claim) for the hours it slept."""

    hours: Decimal
    asleep_hours: Decimal
    cost: Decimal


def environment_priced(
    env: Any,
    *,
    now: datetime,
    begin: datetime | None = None,
    end: datetime | None = None,
    slept: Sequence[Period] | None = None,
) -> Priced:
    """`Priced` of an environment within [begin, end): `hourly_cost` per hour up,
    `asleep_hourly_cost` per hour asleep; nothing before it was ready. `slept`: its sleeps, when
    the caller read them already."""
    if env.ready_at is None:
        return Priced(Decimal("0.00"), Decimal("0.00"), Decimal(0))
    slept = periods(env.sleeps) if slept is None else slept
    start, stop = _window(env.ready_at, env.deleted_at, now, begin, end)
    asleep = Decimal(asleep_seconds(slept, start, stop) / 3600).quantize(HOURS)
    hours = up_hours(
        ready_at=env.ready_at, gone_at=env.deleted_at, slept=slept, now=now, begin=begin, end=end
    )
    cost = env.hourly_cost * hours + (env.asleep_hourly_cost or 0) * asleep
    return Priced(hours, asleep, cost)


def asleep_from(sleeps: list, at: datetime) -> list:
    """`sleeps` with a sleep opened at `at` (one already open stays as it is)."""
    if sleeps and isinstance(sleeps[-1], list) and len(sleeps[-1]) == 2 and not sleeps[-1][1]:
        return list(sleeps)
    return [*sleeps, [at.isoformat(), None]]


def awake_from(sleeps: list, at: datetime) -> list:
    """`sleeps` with the open sleep closed at `at` (none open: as they are)."""
    if not sleeps or not isinstance(sleeps[-1], list) or len(sleeps[-1]) != 2 or sleeps[-1][1]:
        return list(sleeps)
    return [*sleeps[:-1], [sleeps[-1][0], at.isoformat()]]
