"""Budget arithmetic (portal/budget_math.py): the month, hours to its end, thresholds, the chart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from portal import budget_math as bm

NOW = datetime(2026, 2, 20, 12, 0, tzinfo=UTC)


def test_month_bounds_are_the_utc_calendar_month():
    assert bm.month_bounds(NOW) == (
        datetime(2026, 2, 1, tzinfo=UTC),
        datetime(2026, 3, 1, tzinfo=UTC),
    )
    dec = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)
    assert bm.month_bounds(dec)[1] == datetime(2027, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ttl_hours", "expected"),
    [
        # 48 h fit before 1 March (8 days 12 h = 204 h left): 48 x $0.25 = $12.00.
        (48, Decimal("12.00")),
        # 300 h do not: only the 204 h left in February count, 204 x $0.25 = $51.00.
        (300, Decimal("51.00")),
    ],
    ids=["ttl-inside-month", "ttl-past-month-end"],
)
def test_a_requests_cost_this_month_stops_at_the_months_end(ttl_hours, expected):
    assert bm.request_month_cost(hourly=Decimal("0.25"), ttl_hours=ttl_hours, now=NOW) == expected


def test_running_costs_stop_at_expiry_and_skip_hours_asleep():
    end = NOW + timedelta(hours=10)
    awake_all = bm.Running(hourly=Decimal("2"), until=None)
    expires = bm.Running(hourly=Decimal("2"), until=NOW + timedelta(hours=4))
    # Asleep half of every span (a schedule): 10 h -> 5 h awake.
    half = bm.Running(
        hourly=Decimal("2"), until=None, awake=lambda a, b: bm.hours_between(a, b) / 2
    )
    # 10 h x $2 + 4 h x $2 + 5 h x $2 = $38.
    assert bm.cost_to([awake_all, expires, half], NOW, end) == Decimal("38")
    expired = bm.Running(hourly=Decimal("2"), until=NOW - timedelta(hours=1))
    assert bm.cost_to([expired], NOW, end) == 0


@pytest.mark.parametrize(
    ("budget", "spend", "forecast", "state", "percent"),
    [
        (Decimal("100"), Decimal("10"), Decimal("50"), "ok", 10),
        (Decimal("100"), Decimal("10"), Decimal("120"), "over", 10),
        (Decimal("100"), Decimal("80"), Decimal("90"), "warning", 80),  # 80 >= 80% of 100
        (Decimal("100"), Decimal("100"), Decimal("130"), "reached", 100),
        (Decimal("0"), Decimal("0"), Decimal("0"), "reached", 100),  # a zero budget is spent
    ],
    ids=["ok", "forecast-over", "warning", "reached", "zero-budget"],
)
def test_state_of_a_month(budget, spend, forecast, state, percent):
    f = bm.Figures(budget=budget, spend=spend, forecast=forecast, warn_percent=80)
    assert (f.state, f.percent_spent) == (state, percent)
    assert f.remaining == bm.money(budget - forecast)


def test_over_by_is_what_the_forecast_plus_the_request_passes_the_budget():
    f = bm.Figures(
        budget=Decimal("100"), spend=Decimal("20"), forecast=Decimal("90"), warn_percent=80
    )
    assert f.over_by(Decimal("5")) == 0  # 95 <= 100
    assert f.over_by(Decimal("25.50")) == Decimal("15.50")  # 115.50 - 100


def test_thresholds_are_told_once_each_in_order():
    f = bm.Figures(
        budget=Decimal("100"), spend=Decimal("100"), forecast=Decimal("100"), warn_percent=75
    )
    assert bm.thresholds_crossed(figures=f, told=[]) == [75, 100]
    assert bm.thresholds_crossed(figures=f, told=[75]) == [100]
    assert bm.thresholds_crossed(figures=f, told=[75, 100]) == []
    low = bm.Figures(
        budget=Decimal("100"), spend=Decimal("74.99"), forecast=Decimal("0"), warn_percent=75
    )
    assert bm.thresholds_crossed(figures=low, told=[]) == []


def test_month_series_has_spend_up_to_now_and_the_forecast_after():
    # Spend grows $1 an hour from the month's start; one environment at $2/h runs on.
    start, _ = bm.month_bounds(NOW)

    def spend_at(at):
        return bm.hours_between(start, at)

    series = bm.month_series(
        now=NOW, spend_at=spend_at, running=[bm.Running(Decimal("2"), None)], budget=Decimal("900")
    )
    assert len(series) == 28  # February 2026
    first, today, last = series[0], series[19], series[-1]
    assert (first["spend"], first["forecast"]) == (Decimal("24.00"), None)
    # 20 February: spend now (19 days 12 h = 468 h), and the forecast to its end: 468 + 12 h x $2.
    assert (today["spend"], today["forecast"]) == (Decimal("468.00"), Decimal("492.00"))
    # 28 February: 468 + (8 days 12 h = 204 h) x $2 = $876.
    assert (last["spend"], last["forecast"], last["budget"]) == (
        None,
        Decimal("876.00"),
        Decimal("900.00"),
    )
