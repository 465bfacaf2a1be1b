"""A team's sleep schedule as plain rules: when its environments should be awake. No Django.

A schedule is an IANA time zone, waking windows and sleep windows, each window a set of weekdays
and a wall-clock start and end in that zone (an end at or before the start runs past midnight
into the next day). At an instant the schedule wants environments

    awake   if the local time is inside a waking window and inside no sleep window,
    asleep  otherwise (sleep windows win: a holiday or a maintenance night inside working hours).

Windows are wall-clock times, so "08:00" is 08:00 local on both sides of a daylight-saving
change: the UTC instant moves, the working day does not. A wall-clock time that does not exist
(02:30 on a spring-forward night) is never reached, and one that happens twice (an autumn
fall-back hour) is inside a window both times: both follow from reading each instant's local
time, which is always well defined. `awake_intervals` lists the same thing as UTC intervals
(for forecasts and schedule previews), built from `wants_awake` at the instants it can change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
MAX_WINDOWS = 28


class ScheduleInvalid(ValueError):
    """A schedule that cannot be read; `field` names what is wrong (time_zone, wake_windows, ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Window:
    """Weekdays (0 = Monday) and a wall-clock start and end; end <= start runs past midnight."""

    days: frozenset[int]
    start: time
    end: time

    @property
    def overnight(self) -> bool:
        return self.end <= self.start

    def contains(self, local: datetime) -> bool:
        """True if the local wall-clock time `local` is inside the window."""
        t, day = local.time().replace(tzinfo=None), local.weekday()
        if not self.overnight:
            return day in self.days and self.start <= t < self.end
        # Overnight: from start on one of its days to end on the following day.
        return (day in self.days and t >= self.start) or (
            (day - 1) % 7 in self.days and t < self.end
        )

    def as_dict(self) -> dict:
        return {
            "days": [DAYS[d] for d in sorted(self.days)],
            "start": self.start.strftime("%H:%M"),
            "end": self.end.strftime("%H:%M"),
        }


@dataclass(frozen=True)
class Schedule:
    """Time zone, waking windows (at least one) and sleep windows (see the module docstring)."""

    time_zone: str
    wake: tuple[Window, ...]
    sleep: tuple[Window, ...] = ()

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)


def _window(raw: object, field: str, index: int) -> Window:
    where = f"{field}[{index}]"
    if not isinstance(raw, dict):
        raise ScheduleInvalid(field, f"{where} must be an object with days, start and end")
    unknown = set(raw) - {"days", "start", "end"}
    if unknown:
        raise ScheduleInvalid(field, f"{where} has unknown fields {sorted(unknown)}")
    days = raw.get("days")
    if not isinstance(days, list) or not days:
        raise ScheduleInvalid(field, f"{where}.days must list weekdays ({', '.join(DAYS)})")
    wrong = [d for d in days if not isinstance(d, str) or d.lower() not in DAYS]
    if wrong:
        raise ScheduleInvalid(
            field, f"{where}.days has unknown days {wrong}; use {', '.join(DAYS)}"
        )
    bounds = []
    for key in ("start", "end"):
        value = raw.get(key)
        match = _HHMM.match(value) if isinstance(value, str) else None
        if match is None:
            raise ScheduleInvalid(field, f"{where}.{key} must be a 24-hour HH:MM time")
        bounds.append(time(int(match.group(1)), int(match.group(2))))
    if bounds[0] == bounds[1]:
        raise ScheduleInvalid(field, f"{where} starts and ends at the same time")
    return Window(frozenset(DAYS.index(d.lower()) for d in days), bounds[0], bounds[1])


# Zones of the system's database that name no place: the machine's own zone and tzdata's
# placeholder. A schedule being set must name where its team's people are (`place_problem`);
# one stored before this rule is still read as it was.
NOT_PLACES = frozenset({"localtime", "Factory"})


def place_problem(time_zone: object) -> str | None:
    """Why a zone a team sets names no place, or None."""
    if time_zone in NOT_PLACES:
        return f"{time_zone!r} names no place: give the team's zone (e.g. Europe/Berlin)"
    return None


def parse_schedule(*, time_zone: object, wake_windows: object, sleep_windows: object) -> Schedule:
    """A schedule from its stored or posted form; raises ScheduleInvalid naming the field."""
    if not isinstance(time_zone, str) or time_zone not in available_timezones():
        raise ScheduleInvalid(
            "time_zone", f"{time_zone!r} is not an IANA time zone (e.g. Europe/Berlin)"
        )
    try:
        ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleInvalid("time_zone", f"{time_zone!r} cannot be loaded: {exc}") from exc
    windows: dict[str, tuple[Window, ...]] = {}
    for field, raw in (("wake_windows", wake_windows), ("sleep_windows", sleep_windows or [])):
        if not isinstance(raw, list):
            raise ScheduleInvalid(field, "must be a list of windows")
        if len(raw) > MAX_WINDOWS:
            raise ScheduleInvalid(field, f"at most {MAX_WINDOWS} windows")
        windows[field] = tuple(_window(w, field, i) for i, w in enumerate(raw))
    if not windows["wake_windows"]:
        raise ScheduleInvalid(
            "wake_windows",
            "a schedule needs at least one waking window, or its environments never wake",
        )
    return Schedule(time_zone, windows["wake_windows"], windows["sleep_windows"])


def wants_awake(schedule: Schedule, at: datetime) -> bool:
    """Whether the schedule wants environments awake at the aware instant `at`."""
    if at.tzinfo is None:
        raise ValueError("a naive datetime has no instant")
    local = at.astimezone(schedule.zone)
    return any(w.contains(local) for w in schedule.wake) and not any(
        w.contains(local) for w in schedule.sleep
    )


def _transition(zone: ZoneInfo, lo: datetime, hi: datetime) -> datetime:
    """The first second in (lo, hi] with hi's UTC offset (one offset change lies between them)."""
    after = hi.astimezone(zone).utcoffset()
    a, b = int(lo.timestamp()), int(hi.timestamp())
    while b - a > 1:
        mid = (a + b) // 2
        if datetime.fromtimestamp(mid, UTC).astimezone(zone).utcoffset() == after:
            b = mid
        else:
            a = mid
    return datetime.fromtimestamp(b, UTC)


def _change_points(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """Every instant in (start, end) at which `wants_awake` may change: where the local time is a
    window's start or end or midnight (both occurrences of a repeated wall time), and where the
    zone's UTC offset changes (the wall clock jumps)."""
    zone = schedule.zone
    walls = {time(0)}
    for w in (*schedule.wake, *schedule.sleep):
        walls |= {w.start, w.end}
    points: set[datetime] = set()
    day = start.astimezone(zone).date() - timedelta(days=1)
    last = end.astimezone(zone).date() + timedelta(days=1)
    while day <= last:
        for wall in walls:
            for fold in (0, 1):
                t = datetime.combine(day, wall, tzinfo=zone).replace(fold=fold).astimezone(UTC)
                if start < t < end:
                    points.add(t)
        lo = datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)
        hi = datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone).astimezone(UTC)
        if lo.astimezone(zone).utcoffset() != hi.astimezone(zone).utcoffset():
            t = _transition(zone, lo, hi)
            if start < t < end:
                points.add(t)
        day += timedelta(days=1)
    return sorted(points)


def awake_intervals(
    schedule: Schedule, start: datetime, end: datetime
) -> list[tuple[datetime, datetime]]:
    """The UTC intervals within [start, end) in which the schedule wants environments awake,
    sorted and disjoint. Between two change points the wall clock runs on without reaching a
    window's edge, so `wants_awake` at the first instant holds for the whole stretch."""
    if end <= start:
        return []
    bounds = [start, *_change_points(schedule, start, end), end]
    out: list[tuple[datetime, datetime]] = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        if not wants_awake(schedule, lo):
            continue
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def awake_fraction(schedule: Schedule, start: datetime, end: datetime) -> float:
    """The share of [start, end) the schedule wants environments awake, in [0, 1]."""
    total = (end - start).total_seconds()
    if total <= 0:
        return 0.0
    awake = sum((hi - lo).total_seconds() for lo, hi in awake_intervals(schedule, start, end))
    return min(1.0, max(0.0, awake / total))
