"""Hours an environment was up: ready until deleted (or now), less the hours it slept.

An environment records each sleep as a `[asleep_from, awake_from]` pair of ISO timestamps
(`Environment.sleeps`; the last one open, `None`, while it sleeps): the estimate of what it
spends counts the hours it ran, as the budget's forecast does. Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

HOURS = Decimal("0.01")


def _seconds(begin: datetime, end: datetime) -> float:
    return max((end - begin).total_seconds(), 0.0)


def asleep_seconds(sleeps: Sequence[Sequence[str | None]], begin: datetime, end: datetime) -> float:
    """Seconds of [begin, end) the environment slept (an open sleep lasts until `end`)."""
    total = 0.0
    for pair in sleeps:
        start = datetime.fromisoformat(pair[0])
        stop = datetime.fromisoformat(pair[1]) if len(pair) > 1 and pair[1] else end
        total += _seconds(max(start, begin), min(stop, end))
    return total


def up_hours(
    *,
    ready_at: datetime,
    gone_at: datetime | None,
    sleeps: Sequence[Sequence[str | None]],
    now: datetime,
    begin: datetime | None = None,
    end: datetime | None = None,
) -> Decimal:
    """Hours within [begin, end) (the whole life by default) the environment was ready and
    awake: from ready until deleted (or now), less its sleeps."""
    start = max(ready_at, begin) if begin else ready_at
    stop = min(gone_at or now, end) if end else gone_at or now
    if stop <= start:
        return Decimal("0.00")
    seconds = _seconds(start, stop) - asleep_seconds(sleeps, start, stop)
    return Decimal(max(seconds, 0.0) / 3600).quantize(HOURS)


def asleep_from(sleeps: list, at: datetime) -> list:
    """`sleeps` with a sleep opened at `at` (one already open stays as it is)."""
    if sleeps and not sleeps[-1][1]:
        return list(sleeps)
    return [*sleeps, [at.isoformat(), None]]


def awake_from(sleeps: list, at: datetime) -> list:
    """`sleeps` with the open sleep closed at `at` (none open: as they are)."""
    if not sleeps or sleeps[-1][1]:
        return list(sleeps)
    return [*sleeps[:-1], [sleeps[-1][0], at.isoformat()]]
