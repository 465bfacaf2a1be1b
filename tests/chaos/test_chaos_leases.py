"""Lease arithmetic (canary/chaos/leases.py): the leader-election ordering, expiry and the stop-injecting rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from canary.chaos import leases
from canary.chaos.leases import LeaseTimingError, LeaseTimings

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DEFAULT = LeaseTimings()  # 15 s lease, 10 s renew deadline, 2 s retry, 1 s skew, 2 s revert budget


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"retry_period": 10.0}, "retry_period"),  # retry must be shorter than the renew deadline
        ({"renew_deadline": 15.0}, "renew_deadline"),  # renew deadline shorter than the lease
        ({"renew_deadline": 12.5}, "revert"),  # 12.5 + 2 + 1 > 15: no time to revert before expiry
        (
            {"max_clock_skew": 2.0, "renew_deadline": 5.0},
            "10x",
        ),  # 15 < 10 x 2: the lease is not >> skew
        ({"lease_duration": 0.0}, "positive"),
    ],
    ids=[
        "retry-ge-deadline",
        "deadline-ge-duration",
        "no-revert-margin",
        "skew-too-large",
        "zero-duration",
    ],
)
def test_unsafe_timings_are_refused(kwargs, message):
    with pytest.raises(LeaseTimingError, match=message):
        LeaseTimings(**kwargs)


def test_old_holder_stops_before_a_new_one_may_start_even_with_skew():
    # The holder reverts by renew_deadline + revert_budget (12 s); a candidate whose clock
    # is max_clock_skew behind takes over no earlier than lease_duration + skew - skew = 15 s.
    t = DEFAULT
    holder_done = t.renew_deadline + t.revert_budget
    earliest_takeover_on_a_fast_clock = t.takeover_after - t.max_clock_skew
    assert holder_done < earliest_takeover_on_a_fast_clock
    assert leases.reap_after(t) <= t.lease_duration


@pytest.mark.parametrize(
    "seconds,expected",
    [(15.9, False), (16.0, True)],  # takeover after duration 15 + skew 1
    ids=["within-skew-margin", "lapsed"],
)
def test_expiry_for_a_candidate_includes_the_clock_skew(seconds, expected):
    assert leases.is_expired(T0, T0 + timedelta(seconds=seconds), DEFAULT) is expected
    assert leases.may_acquire("a", T0, "b", T0 + timedelta(seconds=seconds), DEFAULT) is expected


def test_free_or_own_lease_may_always_be_acquired():
    assert leases.may_acquire("", None, "b", T0, DEFAULT)
    assert leases.may_acquire("b", T0, "b", T0, DEFAULT)
    assert leases.is_expired(None, T0, DEFAULT)


@pytest.mark.parametrize(
    "elapsed,expected",
    [(9.99, False), (10.0, True)],  # renew deadline 10 s on the monotonic clock
    ids=["before-deadline", "at-deadline"],
)
def test_holder_stops_injecting_at_the_renew_deadline(elapsed, expected):
    assert leases.must_stop_injecting(100.0, 100.0 + elapsed, DEFAULT) is expected
    assert leases.remaining_before_stop(100.0, 100.0 + elapsed, DEFAULT) == pytest.approx(
        10.0 - elapsed
    )


@pytest.mark.parametrize(
    "seconds,expected",
    [
        (12.9, False),
        (13.0, True),
    ],  # reap after renew deadline 10 + revert budget 2 + skew 1 = 13 s <= 15 s
    ids=["holder-may-still-be-reverting", "holder-must-have-reverted"],
)
def test_reaper_reverts_once_the_holder_must_have_reverted(seconds, expected):
    assert leases.reap_due(T0, T0 + timedelta(seconds=seconds), DEFAULT) is expected
    assert leases.reap_due(None, T0, DEFAULT)


def test_worst_case_after_a_crash_is_lease_plus_reaper_period():
    assert leases.worst_case_revert_after_crash(DEFAULT, 5.0) == 20.0
    assert leases.expires_at(T0, DEFAULT) == T0 + timedelta(seconds=15)
