"""Lease arithmetic for chaos faults: leader-election timings, expiry and the stop-injecting rule.

Pure: no Django. The semantics follow client-go's leader election
(`k8s.io/client-go/tools/leaderelection`):

- `lease_duration`: how long a lease stays valid after its last renewal. A
  candidate may take over only when the lease has not been renewed for
  `lease_duration + max_clock_skew` by the candidate's own clock.
- `renew_deadline`: how long the holder keeps trying to renew before it gives
  up. A holder whose last successful renewal is older than `renew_deadline`
  stops injecting and reverts, so its fault is gone before the lease can
  expire anywhere.
- `retry_period`: the pause between renew (and acquire) attempts.
- `max_clock_skew`: the largest difference between two controllers' clocks we
  tolerate; every bound above keeps at least that much margin.

The invariant the timings protect (see `validate_timings`):

    retry_period < renew_deadline
    renew_deadline + revert_budget + max_clock_skew <= lease_duration
    max_clock_skew * 10 <= lease_duration          ("much longer than the skew")

The reaper reverts a fault `reap_after` = renew_deadline + revert_budget +
max_clock_skew after the last renewal (never later than lease_duration): a
crashed holder's fault is gone within lease_duration + reaper_period.

The ordering guarantees that the old holder has stopped injecting (renew_deadline + revert_budget
after its last renewal) before a new holder can start (lease_duration +
max_clock_skew after the same renewal).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta

SKEW_FACTOR = 10  # lease_duration must be at least this many times the clock skew


class LeaseTimingError(ValueError):
    """Timings that break the leader-election ordering."""


@dataclass(frozen=True)
class LeaseTimings:
    """Leader-election timings in seconds."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    max_clock_skew: float = 1.0
    revert_budget: float = 2.0  # time the holder allows itself to revert after giving up

    def __post_init__(self) -> None:
        validate_timings(self)

    @property
    def takeover_after(self) -> float:
        """Seconds without renewal after which another controller may acquire the lease."""
        return self.lease_duration + self.max_clock_skew

    @property
    def stop_injecting_after(self) -> float:
        """Seconds without a successful renewal after which the holder must revert."""
        return self.renew_deadline


# The timings' names: columns of an experiment, and settings KILN_CHAOS_<NAME>.
TIMING_FIELDS = tuple(f.name for f in fields(LeaseTimings))


def validate_timings(t: LeaseTimings) -> None:
    """Raise LeaseTimingError unless retry < renew deadline < duration with skew and revert margins."""
    values = {
        "lease_duration": t.lease_duration,
        "renew_deadline": t.renew_deadline,
        "retry_period": t.retry_period,
    }
    for name, value in values.items():
        if not value > 0:
            raise LeaseTimingError(f"{name} must be positive, got {value}")
    if t.max_clock_skew < 0 or t.revert_budget < 0:
        raise LeaseTimingError("max_clock_skew and revert_budget must not be negative")
    if not t.retry_period < t.renew_deadline:
        raise LeaseTimingError(
            f"retry_period ({t.retry_period}s) must be shorter than renew_deadline ({t.renew_deadline}s)"
        )
    if not t.renew_deadline < t.lease_duration:
        raise LeaseTimingError(
            f"renew_deadline ({t.renew_deadline}s) must be shorter than lease_duration ({t.lease_duration}s)"
        )
    if t.renew_deadline + t.revert_budget + t.max_clock_skew > t.lease_duration:
        raise LeaseTimingError(
            "renew_deadline + revert_budget + max_clock_skew "
            f"({t.renew_deadline + t.revert_budget + t.max_clock_skew}s) must not exceed "
            f"lease_duration ({t.lease_duration}s): the holder must have reverted before the lease can expire"
        )
    if t.max_clock_skew * SKEW_FACTOR > t.lease_duration:
        raise LeaseTimingError(
            f"lease_duration ({t.lease_duration}s) must be at least {SKEW_FACTOR}x "
            f"max_clock_skew ({t.max_clock_skew}s)"
        )


def expires_at(renewed_at: datetime, t: LeaseTimings) -> datetime:
    """When a lease renewed at `renewed_at` lapses (holder's view, without skew)."""
    return renewed_at + timedelta(seconds=t.lease_duration)


def is_expired(renewed_at: datetime | None, now: datetime, t: LeaseTimings) -> bool:
    """True if the lease has lapsed for an observer whose clock may differ by max_clock_skew."""
    if renewed_at is None:
        return True
    return now >= renewed_at + timedelta(seconds=t.takeover_after)


def may_acquire(
    holder: str, renewed_at: datetime | None, candidate: str, now: datetime, t: LeaseTimings
) -> bool:
    """True if `candidate` may take the lease: free, already its own, or lapsed beyond the skew margin."""
    if not holder:
        return True
    if holder == candidate:
        return True
    return is_expired(renewed_at, now, t)


def must_stop_injecting(last_renew_monotonic: float, now_monotonic: float, t: LeaseTimings) -> bool:
    """True once the holder's last successful renewal is older than the renew deadline (monotonic clock)."""
    return now_monotonic - last_renew_monotonic >= t.stop_injecting_after


def remaining_before_stop(
    last_renew_monotonic: float, now_monotonic: float, t: LeaseTimings
) -> float:
    """Seconds left before the holder must stop injecting (negative once past the deadline)."""
    return t.stop_injecting_after - (now_monotonic - last_renew_monotonic)


def reap_after(t: LeaseTimings) -> float:
    """Seconds after the last renewal when the reaper reverts: renew_deadline + revert_budget + max_clock_skew.

    By then a live holder has given up and reverted by its own rule, even if the
    reaper's clock runs max_clock_skew ahead of the holder's; validate_timings
    keeps this at or below lease_duration, so the reaper never waits past the
    lease's expiry and its own pass time fits in the difference.
    """
    return t.renew_deadline + t.revert_budget + t.max_clock_skew


def reap_due(renewed_at: datetime | None, now: datetime, t: LeaseTimings) -> bool:
    """True if a reaper must revert the fault: the holder is past the point where it had to revert itself."""
    if renewed_at is None:
        return True
    return now >= renewed_at + timedelta(seconds=reap_after(t))


def worst_case_revert_after_crash(t: LeaseTimings, reaper_period: float) -> float:
    """Upper bound (seconds) from a holder's crash to the reaper's revert: duration + reaper period."""
    return t.lease_duration + reaper_period
