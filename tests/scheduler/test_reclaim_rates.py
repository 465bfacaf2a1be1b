"""Spot reclaim rates: the pricing models' interruption bands as a Poisson process (pure)."""

from __future__ import annotations

import math

import pytest

from scheduler.simulation.reclaims import MONTH_SECONDS, monthly_rate, reclaim_probability


@pytest.mark.parametrize(
    ("bucket", "per_month"),
    [
        (0, 0.025),  # "<5%": likelihood 0.1 x the top band's 25%
        (2, 0.125),  # "10-15%": 0.5 x 25%
        (4, 0.25),  # ">20%": 1.0 x 25%
        (None, 0.25),  # no quote: the worst band
        (9, 0.25),  # a bucket the price book does not know: the worst band
    ],
    ids=["lt5", "10-15", "gt20", "unquoted", "unknown-bucket"],
)
def test_monthly_rates_follow_the_interruption_bands(bucket, per_month):
    assert monthly_rate(bucket) == pytest.approx(per_month)


def test_the_chance_over_a_window_is_poisson_at_the_scaled_rate():
    # A month at the real rate: 1 - e^-0.25 = 0.2212 for the worst band.
    assert reclaim_probability(4, MONTH_SECONDS, 1.0) == pytest.approx(1 - math.exp(-0.25))
    # The demo's scale of 20,000 over a 60 s tick: rate 0.25 / 2,592,000 s x 20,000 = 0.001929/s,
    # so 1 - e^(-0.1157) = 0.1093.
    assert reclaim_probability(4, 60.0, 20000.0) == pytest.approx(0.10930, abs=1e-4)
    assert reclaim_probability(0, 60.0, 20000.0) < reclaim_probability(4, 60.0, 20000.0)
    assert reclaim_probability(4, 0.0, 20000.0) == 0.0
    assert reclaim_probability(4, 60.0, -5.0) == 0.0  # a negative scale reclaims nothing
