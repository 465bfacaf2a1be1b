"""The sleep schedule's pure rules: reading one, and what it wants at an instant across DST."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.sleep_schedule import (
    DAYS,
    ScheduleInvalid,
    awake_fraction,
    awake_intervals,
    parse_schedule,
    place_problem,
    wants_awake,
)

WORKDAYS = ["mon", "tue", "wed", "thu", "fri"]


def office(zone: str = "Europe/Berlin", **extra) -> object:
    return parse_schedule(
        time_zone=zone,
        wake_windows=[{"days": WORKDAYS, "start": "08:00", "end": "19:00"}],
        sleep_windows=extra.get("sleep", []),
    )


@pytest.mark.parametrize("zone", ["localtime", "Factory"])
def test_a_zone_that_names_no_place_is_refused_when_set_and_read_when_stored(zone):
    windows = [{"days": ["mon"], "start": "08:00", "end": "09:00"}]
    assert place_problem(zone) and place_problem("Europe/Berlin") is None
    # A schedule stored before the rule still reads: the reaper's pass goes on.
    assert parse_schedule(time_zone=zone, wake_windows=windows, sleep_windows=[]).time_zone == zone


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"time_zone": "Mars/Olympus", "wake_windows": [{"days": ["mon"], "start": "08:00", "end": "09:00"}]}, "time_zone"),
        ({"time_zone": "", "wake_windows": [{"days": ["mon"], "start": "08:00", "end": "09:00"}]}, "time_zone"),
        ({"time_zone": "UTC", "wake_windows": []}, "wake_windows"),
        ({"time_zone": "UTC", "wake_windows": [{"days": ["funday"], "start": "08:00", "end": "09:00"}]}, "wake_windows"),
        ({"time_zone": "UTC", "wake_windows": [{"days": ["mon"], "start": "8am", "end": "09:00"}]}, "wake_windows"),
        ({"time_zone": "UTC", "wake_windows": [{"days": ["mon"], "start": "09:00", "end": "09:00"}]}, "wake_windows"),
        ({"time_zone": "UTC", "wake_windows": [{"days": ["mon"], "start": "08:00", "end": "24:00"}]}, "wake_windows"),
        ({"time_zone": "UTC", "wake_windows": [{"days": ["mon"], "start": "08:00", "end": "09:00", "x": 1}]}, "wake_windows"),
        ({"time_zone": "UTC", "wake_windows": [{"days": ["mon"], "start": "08:00", "end": "09:00"}], "sleep_windows": "nights"}, "sleep_windows"),
    ],
    ids=["unknown-zone", "empty-zone", "no-waking-window", "unknown-day", "not-hh-mm", "empty-window", "hour-24", "unknown-key", "sleep-not-a-list"],
)  # fmt: skip
def test_a_schedule_that_cannot_be_read_names_its_field(kwargs, field):
    with pytest.raises(ScheduleInvalid) as caught:
        parse_schedule(**{"sleep_windows": [], **kwargs})
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("instant", "awake"),
    [
        # Friday 27 March 2026, CET (UTC+1): 08:00 local is 07:00 UTC.
        (datetime(2026, 3, 27, 6, 59, tzinfo=UTC), False),
        (datetime(2026, 3, 27, 7, 0, tzinfo=UTC), True),
        (datetime(2026, 3, 27, 17, 59, tzinfo=UTC), True),
        (datetime(2026, 3, 27, 18, 0, tzinfo=UTC), False),
        # Sunday 29 March the clocks go forward; Monday 30 March, CEST (UTC+2): 08:00 is 06:00 UTC.
        (datetime(2026, 3, 30, 5, 59, tzinfo=UTC), False),
        (datetime(2026, 3, 30, 6, 0, tzinfo=UTC), True),
        (datetime(2026, 3, 30, 16, 59, tzinfo=UTC), True),
        (datetime(2026, 3, 30, 17, 0, tzinfo=UTC), False),
        # Saturday: no waking window.
        (datetime(2026, 3, 28, 10, 0, tzinfo=UTC), False),
    ],
    ids=str,
)
def test_the_working_day_is_wall_clock_time_on_both_sides_of_the_change(instant, awake):
    assert wants_awake(office(), instant) is awake


def test_the_waking_hours_of_a_week_are_its_windows_whatever_the_clocks_do():
    """Five 11-hour days is 55 h awake in the week the clocks go forward (the change is on a
    Sunday night, outside every window), and 55 h in the week they go back."""
    for start in (datetime(2026, 3, 23, tzinfo=UTC), datetime(2026, 10, 19, tzinfo=UTC)):
        spans = awake_intervals(office(), start, start + timedelta(days=7))
        hours = sum((hi - lo).total_seconds() for lo, hi in spans) / 3600
        assert hours == 55


def test_a_window_across_the_skipped_hour_starts_where_the_clock_resumes():
    """02:30-03:30 on the spring-forward Sunday: 02:00-03:00 never happens, so it is awake from
    03:00 CEST (01:00 UTC) to 03:30 CEST (01:30 UTC): half an hour, not one."""
    s = parse_schedule(
        time_zone="Europe/Berlin",
        wake_windows=[{"days": ["sun"], "start": "02:30", "end": "03:30"}],
        sleep_windows=[],
    )
    spans = awake_intervals(s, datetime(2026, 3, 28, tzinfo=UTC), datetime(2026, 3, 30, tzinfo=UTC))
    assert spans == [
        (datetime(2026, 3, 29, 1, 0, tzinfo=UTC), datetime(2026, 3, 29, 1, 30, tzinfo=UTC))
    ]


def test_an_overnight_window_through_the_repeated_hour_is_awake_both_times():
    """Saturday 22:00 to 02:30 on the fall-back night: 02:00-02:30 happens twice (CEST, then
    CET), and both are inside the window."""
    s = parse_schedule(
        time_zone="Europe/Berlin",
        wake_windows=[{"days": ["sat"], "start": "22:00", "end": "02:30"}],
        sleep_windows=[],
    )
    spans = awake_intervals(
        s, datetime(2026, 10, 24, tzinfo=UTC), datetime(2026, 10, 26, tzinfo=UTC)
    )
    assert spans == [
        (datetime(2026, 10, 24, 20, 0, tzinfo=UTC), datetime(2026, 10, 25, 0, 30, tzinfo=UTC)),
        (datetime(2026, 10, 25, 1, 0, tzinfo=UTC), datetime(2026, 10, 25, 1, 30, tzinfo=UTC)),
    ]


def test_sleep_windows_win_over_waking_windows():
    holiday = office(sleep=[{"days": ["fri"], "start": "00:00", "end": "23:59"}])
    assert not wants_awake(holiday, datetime(2026, 3, 27, 10, 0, tzinfo=UTC))
    assert wants_awake(holiday, datetime(2026, 3, 26, 10, 0, tzinfo=UTC))


def test_a_naive_instant_is_refused():
    with pytest.raises(ValueError, match="naive"):
        wants_awake(office(), datetime(2026, 3, 27, 10, 0))


ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "UTC",
    "America/Santiago",
]
times = st.integers(min_value=0, max_value=23 * 60 + 59).map(
    lambda m: f"{m // 60:02d}:{m % 60:02d}"
)
windows = st.fixed_dictionaries(
    {
        "days": st.lists(st.sampled_from(DAYS), min_size=1, max_size=7, unique=True),
        "start": times,
        "end": times,
    }
).filter(lambda w: w["start"] != w["end"])
instants = st.datetimes(
    min_value=datetime(2025, 1, 1), max_value=datetime(2028, 12, 31), timezones=st.just(UTC)
)


@settings(max_examples=200, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    wake=st.lists(windows, min_size=1, max_size=3),
    sleep=st.lists(windows, max_size=2),
    start=instants,
    probes=st.lists(
        st.integers(min_value=0, max_value=14 * 24 * 3600 - 1), min_size=1, max_size=20
    ),
)
def test_the_intervals_and_the_instant_rule_agree_everywhere_across_dst(
    zone, wake, sleep, start, probes
):
    """Whatever the zone (30-minute DST on Lord Howe, none in Kolkata, the southern hemisphere),
    an instant is in an awake interval exactly when the schedule wants it awake, and the rule
    reads the local wall clock: its answer is the windows' verdict on the local time."""
    s = parse_schedule(time_zone=zone, wake_windows=wake, sleep_windows=sleep)
    end = start + timedelta(days=14)
    spans = awake_intervals(s, start, end)
    assert all(lo < hi for lo, hi in spans)
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False))  # disjoint, merged
    for offset in probes:
        at = start + timedelta(seconds=offset)
        inside = any(lo <= at < hi for lo, hi in spans)
        assert inside is wants_awake(s, at), at
        local = at.astimezone(ZoneInfo(zone))
        by_wall_clock = any(w.contains(local) for w in s.wake) and not any(
            w.contains(local) for w in s.sleep
        )
        assert wants_awake(s, at) is by_wall_clock
    assert 0.0 <= awake_fraction(s, start, end) <= 1.0
