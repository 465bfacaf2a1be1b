"""Budget arithmetic: the month, hours priced to its end, thresholds and the chart's series. No Django.

A team's month is the UTC calendar month. Its figures, all Decimal money in one currency:

- budget   = the monthly amount + the month's raises;
- spend    = what its environments' nodes ran this month, priced (scheduler/showback.py);
- forecast = spend + Σ over what is running: hourly price × the hours it will still run
             before the month ends, stopping at its expiry, with the hours a sleeping
             schedule keeps it asleep at its asleep price (what sleeping keeps);
- a request's cost this month = its hourly estimate × min(TTL, hours left in the month).

A threshold t (the budget's warning percentage, then 100) is crossed when
spend ≥ t% of the budget; each is told once per month. A budget of 0 is crossed at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

CENTS = Decimal("0.01")
REACHED = 100  # the threshold that means the budget is spent

# A span of awake hours: (start, end) -> hours an environment runs in it (sleep schedules).
AwakeHours = Callable[[datetime, datetime], Decimal]


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    """The first instant of `now`'s UTC month and of the next one."""
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def hours_between(start: datetime, end: datetime) -> Decimal:
    """Hours from start to end as a Decimal (0 when end is not after start)."""
    seconds = max((end - start).total_seconds(), 0)
    return Decimal(str(seconds)) / Decimal(3600)


def money(value: Decimal) -> Decimal:
    """Round to cents, half up (the platform's one rounding of money)."""
    return value.quantize(CENTS, ROUND_HALF_UP)


@dataclass(frozen=True)
class Running:
    """Something that runs and keeps costing until `until` (its expiry; None: no end)."""

    hourly: Decimal
    until: datetime | None
    awake: AwakeHours | None = None  # None: awake the whole time
    asleep_hourly: Decimal = Decimal(0)  # what it pays an hour asleep (what sleeping keeps)

    def _stop(self, end: datetime) -> datetime:
        return min(end, self.until) if self.until is not None else end

    def hours(self, start: datetime, end: datetime) -> Decimal:
        """Hours it runs within [start, end): up to its expiry, minus hours asleep."""
        stop = self._stop(end)
        if stop <= start:
            return Decimal(0)
        return self.awake(start, stop) if self.awake else hours_between(start, stop)

    def cost(self, start: datetime, end: datetime) -> Decimal:
        """What it costs within [start, end) (unrounded): its hours awake at its hourly price,
        the rest until its expiry at its asleep price."""
        awake = self.hours(start, end)
        asleep = max(hours_between(start, self._stop(end)) - awake, Decimal(0))
        return self.hourly * awake + self.asleep_hourly * asleep


def cost_to(items: Iterable[Running], start: datetime, end: datetime) -> Decimal:
    """What `items` cost from start to end (unrounded)."""
    return sum((r.cost(start, end) for r in items), Decimal(0))


def request_month_cost(*, hourly: Decimal, ttl_hours: int, now: datetime) -> Decimal:
    """A new request's cost this month: hourly × min(TTL, hours left in the month)."""
    _, end = month_bounds(now)
    hours = min(Decimal(ttl_hours), hours_between(now, end))
    return money(hourly * hours)


@dataclass(frozen=True)
class Figures:
    """A team's month: budget, spend and forecast, and what follows from them."""

    budget: Decimal
    spend: Decimal
    forecast: Decimal
    warn_percent: int

    @property
    def remaining(self) -> Decimal:
        """Budget left after the forecast (negative: the forecast is over)."""
        return money(self.budget - self.forecast)

    @property
    def forecast_over(self) -> Decimal:
        """How far the forecast passes the budget (0 when it does not)."""
        return self.over_by(Decimal(0))

    @property
    def percent_spent(self) -> int:
        """Spend as a whole percentage of the budget (100 when the budget is 0 and spent)."""
        if self.budget <= 0:
            return REACHED if self.spend >= 0 else 0
        return int(self.spend * 100 / self.budget)

    @property
    def reached(self) -> bool:
        """Spend has reached the budget: idle environments sleep, new requests are refused."""
        return self.spend >= self.budget

    @property
    def state(self) -> str:
        """ok, warning (spend past the warning percentage), over (forecast over), reached."""
        if self.reached:
            return "reached"
        if self.spend * 100 >= self.budget * self.warn_percent:
            return "warning"
        if self.forecast > self.budget:
            return "over"
        return "ok"

    def over_by(self, extra: Decimal) -> Decimal:
        """How far the forecast plus `extra` goes over the budget (0 when it does not)."""
        return money(max(self.forecast + extra - self.budget, Decimal(0)))


def thresholds_crossed(*, figures: Figures, told: Iterable[int]) -> list[int]:
    """The thresholds (warning percentage, then 100) spend has crossed and nobody was told of."""
    told = set(told)
    out = []
    for threshold in sorted({figures.warn_percent, REACHED}):
        if threshold in told:
            continue
        if figures.spend * 100 >= figures.budget * threshold:
            out.append(threshold)
    return out


def month_series(
    *,
    now: datetime,
    spend_at: Callable[[datetime], Decimal],
    running: Sequence[Running],
    budget: Decimal,
) -> list[dict]:
    """One point per day end of the month: the spend so far (days up to now, from `spend_at`),
    the forecast (spend now plus what runs from now to that day's end), and the budget."""
    start, end = month_bounds(now)
    spend_now = spend_at(now)
    points = []
    day = start
    while day < end:
        day_end = min(day + timedelta(days=1), end)
        point = {"day": day.date(), "budget": money(budget), "spend": None, "forecast": None}
        if day_end <= now:
            point["spend"] = money(spend_at(day_end))
        elif day <= now:
            point["spend"] = money(spend_now)
        if day_end > now:
            point["forecast"] = money(spend_now + cost_to(running, now, day_end))
        points.append(point)
        day = day_end
    return points
