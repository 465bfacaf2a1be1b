"""The month the spend demo prices (bench/portal/spend_month.py): its calendar and clock, the
seeded people, and how the node-hours an environment held are counted.

People (seeded): `regular` engineers work weekdays about 09:00-17:30 with a lunch break and
a day off now and then; `occasional` ones two random weekdays a week; `abandoned` ones use an
environment for one to three days in the month's first half and never come back.

Spend is node-hours priced: an environment holds its nodes while READY, WAKING or being torn
down, and for the first `consolidateAfter` of its NodePool after falling asleep (Karpenter
removes emptied nodes only then); each hour at the environment's hourly price from the
scheduler's price models (the cost estimate). An environment is lost when it ended before its
TTL and its owner came back before the TTL would have run out.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from unittest import mock

from portal.lifecycle import Status

MONTH_START = datetime(2027, 3, 1, tzinfo=UTC)  # a Monday; March has 31 days
MONTH_END = datetime(2027, 4, 1, tzinfo=UTC)
TICK = timedelta(minutes=15)
TTL_HOURS = 168
NODES_ON = frozenset({Status.READY, Status.WAKING, Status.EXPIRING, Status.TEARING_DOWN})


class Clock:
    """The simulated instant every `timezone.now()` returns while `running()`."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def at_least(self, t: datetime) -> None:
        self.now = max(self.now, t)

    @contextmanager
    def running(self):
        with mock.patch("django.utils.timezone.now", lambda: self.now):
            yield


def sessions_for(kind: str, rng: random.Random) -> list[tuple[datetime, datetime]]:
    """One person's working sessions in the month (UTC), drawn from `rng`."""

    def at(day: datetime, hour: float) -> datetime:
        return day + timedelta(minutes=round(hour * 60 / 15) * 15)

    days = [MONTH_START + timedelta(days=d) for d in range(31)]
    weekdays = [d for d in days if d.weekday() < 5]
    out: list[tuple[datetime, datetime]] = []
    if kind == "regular":
        for day in weekdays:
            if rng.random() < 0.1:
                continue  # a day off
            start, end = at(day, rng.uniform(8.5, 10)), at(day, rng.uniform(16.5, 18.5))
            lunch = at(day, rng.uniform(12, 12.5))
            out += [(start, lunch), (lunch + timedelta(hours=1), end)]
    elif kind == "occasional":
        for week in range(5):
            choices = [d for d in weekdays if (d - MONTH_START).days // 7 == week]
            for day in rng.sample(choices, min(2, len(choices))):
                out.append((at(day, rng.uniform(9.5, 11)), at(day, rng.uniform(14, 16))))
    else:  # abandoned
        first = rng.randrange(0, 14)
        for day in days[first : first + rng.randint(1, 3)]:
            out.append((at(day, rng.uniform(9, 10.5)), at(day, rng.uniform(15, 18))))
    return sorted(out)


def people(seed: int, n: int) -> list[tuple[str, list[tuple[datetime, datetime]]]]:
    """n people of the three kinds (half regular, a quarter each of the others), seeded."""
    rng = random.Random(seed)
    kinds = ["regular"] * (n - 2 * (n // 4)) + ["occasional"] * (n // 4) + ["abandoned"] * (n // 4)
    return [(kind, sessions_for(kind, rng)) for kind in kinds]


@dataclass
class Tracked:
    """An environment the demo created, with the statuses it was seen in and when."""

    env_id: int
    owner: int
    created: datetime
    hourly: Decimal
    consolidate_s: float
    seen: list[tuple[datetime, str]] = field(default_factory=list)


def node_hours(tr: Tracked) -> Decimal:
    """Hours it held nodes within the month (see the module docstring)."""
    hours = Decimal(0)
    marks = [*tr.seen, (MONTH_END, "END")]
    for (start, status), (end, _) in zip(marks, marks[1:], strict=False):
        end = min(end, MONTH_END)
        if end <= start:
            continue
        span = (end - start).total_seconds()
        if status == Status.SLEEPING:
            span = min(span, tr.consolidate_s)
        elif status not in NODES_ON:
            continue
        hours += Decimal(str(span)) / 3600
    return hours


def was_lost(tr: Tracked, sessions: list[tuple[datetime, datetime]]) -> bool:
    """Whether it ended before its TTL while its owner came back before the TTL ran out."""
    ended = next((t for t, s in tr.seen if s in (Status.EXPIRING, Status.FAILED)), None)
    ttl_end = tr.created + timedelta(hours=TTL_HOURS)
    if ended is None or ended >= ttl_end - TICK:
        return False
    return any(ended < a < ttl_end for a, _ in sessions)
