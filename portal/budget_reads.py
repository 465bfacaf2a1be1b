"""Budget reads: a team's month (budget, spend, forecast), its chart series and the budget a
request would meet. Arithmetic in portal/budget_math.py; spend from scheduler/showback.py, the
same node-hours, priced, that showback reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.utils import timezone

from kiln.errors import NotFound
from kiln.identity.models import Team
from kiln.identity.permissions import Actor
from portal import budget_math as bm
from portal import conf, sleep_schedule, uptime
from portal.lifecycle import WOKEN_BY_SCHEDULE, Status
from portal.models import BudgetNotice, BudgetRaise, Environment, SleepSchedule, TeamBudget
from portal.validation import DNS_LABEL_RE
from scheduler.showback import Window, environment_ran_cost

# What keeps costing until it expires or is torn down: approved and on its way up, up, or
# waking. A sleeping environment's nodes are gone: it pays only for what sleeping keeps (its
# database claim) until it wakes, which under its team's sleep schedule is in the schedule's
# waking windows when the schedule or inactivity put it to sleep.
RUNNING = frozenset({Status.APPROVED, Status.PROVISIONING, Status.READY, Status.WAKING})
SCHEDULED = RUNNING | {Status.SLEEPING}


@dataclass(frozen=True)
class TeamMonth:
    """A team's budget month as the pages and the API show it."""

    team: Team
    budget_row: TeamBudget
    month: datetime
    month_end: datetime
    monthly_amount: Decimal
    raised: Decimal
    figures: bm.Figures
    raises: list[BudgetRaise] = field(default_factory=list)
    running: list[bm.Running] = field(default_factory=list)

    @property
    def currency(self) -> str:
        return self.budget_row.currency

    def as_dict(self) -> dict[str, Any]:
        """The API's body: every figure as a decimal string, in the budget's currency."""
        f = self.figures
        return {
            "team": self.team.slug,
            "month": self.month.date().isoformat(),
            "currency": self.currency,
            "monthly_amount": str(self.monthly_amount),
            "raised": str(self.raised),
            "budget": str(f.budget),
            "spend": str(f.spend),
            "forecast": str(f.forecast),
            "remaining": str(f.remaining),
            "percent_spent": f.percent_spent,
            "warn_percent": f.warn_percent,
            "state": f.state,
            "raises": [
                {
                    "amount": str(r.amount),
                    "reason": r.reason,
                    "raised_by": r.raised_by_name,
                    "at": r.created_at.isoformat(),
                }
                for r in self.raises
            ],
        }


def _month_environments(team: Team, start: datetime) -> list[Environment]:
    """The team's environments that were up at some point since `start`."""
    return list(
        Environment.objects.filter(team=team)
        .exclude(ready_at__isnull=True)
        .exclude(deleted_at__lt=start)
        .select_related("team")
    )


def team_spend(*, team: Team, start: datetime, at: datetime, envs: list | None = None) -> Decimal:
    """What the team's environments' nodes ran from `start` until `at`, priced (showback's rule)."""
    envs = _month_environments(team, start) if envs is None else envs
    windows = {e.pk: Window(e.namespace, max(e.created_at, start), e.deleted_at) for e in envs}
    ran = environment_ran_cost(windows=windows, now=at)
    return sum((r.cost for r in ran.values()), Decimal("0.00"))


def team_schedule(team: Team) -> sleep_schedule.Schedule | None:
    """The team's sleep schedule, parsed (None: it has none, or it is switched off)."""
    row = SleepSchedule.objects.filter(team=team, enabled=True).first()
    if row is None:
        return None
    try:
        return sleep_schedule.parse_schedule(
            time_zone=row.time_zone, wake_windows=row.wake_windows, sleep_windows=row.sleep_windows
        )
    except sleep_schedule.ScheduleInvalid:
        return None  # refused when set; one that no longer parses applies nowhere


def _awake(schedule: sleep_schedule.Schedule) -> bm.AwakeHours:
    def hours(start: datetime, end: datetime) -> Decimal:
        spans = sleep_schedule.awake_intervals(schedule, start, end)
        return sum((bm.hours_between(lo, hi) for lo, hi in spans), Decimal(0))

    return hours


def _asleep(start: datetime, end: datetime) -> Decimal:
    return Decimal(0)


def running_of(env: Environment, awake: bm.AwakeHours | None) -> bm.Running:
    """What `env` keeps costing until its expiry: its hourly price in the hours it will be awake
    (`awake`, its team's schedule; None: all of them) and what sleeping keeps in the rest. A
    sleeping one stays asleep unless the schedule wakes it: only what the schedule or
    inactivity put to sleep (`WOKEN_BY_SCHEDULE`), never what a person or the budget did."""
    if env.status == Status.SLEEPING and (
        awake is None or env.sleep_trigger not in WOKEN_BY_SCHEDULE
    ):
        awake = _asleep
    return bm.Running(
        hourly=env.hourly_cost,
        until=env.expires_at,
        awake=awake,
        asleep_hourly=env.asleep_hourly_cost,
    )


def team_running(*, team: Team, now: datetime) -> list[bm.Running]:
    """What keeps costing: each running or sleeping environment until its expiry (`running_of`)."""
    schedule = team_schedule(team)
    awake = _awake(schedule) if schedule is not None else None
    return [
        running_of(e, awake)
        for e in Environment.objects.filter(team=team, status__in=[s.value for s in SCHEDULED])
    ]


def team_month(*, team: Team, now: datetime | None = None) -> TeamMonth | None:
    """The team's month (None when it has no budget)."""
    budget = TeamBudget.objects.filter(team=team).first()
    if budget is None:
        return None
    now = now or timezone.now()
    start, end = bm.month_bounds(now)
    raises = list(BudgetRaise.objects.filter(team=team, month=start.date()))
    raised = sum((r.amount for r in raises), Decimal("0.00"))
    spend = bm.money(team_spend(team=team, start=start, at=now))
    running = team_running(team=team, now=now)
    forecast = bm.money(spend + bm.cost_to(running, now, end))
    figures = bm.Figures(
        budget=budget.monthly_amount + raised,
        spend=spend,
        forecast=forecast,
        warn_percent=budget.warn_percent,
    )
    return TeamMonth(
        team=team,
        budget_row=budget,
        month=start,
        month_end=end,
        monthly_amount=budget.monthly_amount,
        raised=raised,
        figures=figures,
        raises=raises,
        running=running,
    )


def team_for_budget(*, viewer: Actor, slug: str) -> Team:
    """A team whose budget the viewer may see: one whose environments it sees (the same 404 for
    a hidden team as for a missing one)."""
    from portal.selectors import teams_visible

    team = teams_visible(viewer).filter(slug=slug).first()
    if team is None:
        raise NotFound("no such team")
    return team


def team_month_series(*, month: TeamMonth, now: datetime | None = None) -> list[dict]:
    """Spend, forecast and budget per day of the month, for the showback chart."""
    now = now or timezone.now()
    envs = _month_environments(month.team, month.month)
    return bm.month_series(
        now=now,
        spend_at=lambda at: team_spend(team=month.team, start=month.month, at=at, envs=envs),
        running=month.running,
        budget=month.figures.budget,
    )


def budget_notices(*, team: Team, month: datetime) -> list[int]:
    """Thresholds already told this month."""
    return list(
        BudgetNotice.objects.filter(team=team, month=month.date()).values_list(
            "threshold", flat=True
        )
    )


def recent_budget_notices(*, teams: list[str], now: datetime) -> list[BudgetNotice]:
    """This month's budget notices of these teams (the attention list)."""
    start, _ = bm.month_bounds(now)
    return list(
        BudgetNotice.objects.filter(team__slug__in=teams, month=start.date())
        .select_related("team")
        .order_by("-threshold")
    )


def pending_over_budget(
    *, environment: Environment, now: datetime | None = None, months: dict | None = None
) -> Decimal | None:
    """How far approving this pending request would take its team's forecast over the budget,
    or None when it would not (or the team has no budget): what the approval queue shows.
    `months` caches each team's month across the rows of one page."""
    now = now or timezone.now()
    months = {} if months is None else months
    if environment.team_id not in months:
        months[environment.team_id] = team_month(team=environment.team, now=now)
    month = months[environment.team_id]
    if month is None:
        return None
    extra = bm.request_month_cost(
        hourly=environment.hourly_cost, ttl_hours=environment.request.ttl_hours, now=now
    )
    over = month.figures.over_by(extra)
    return over if over > 0 else None


def platform_currency() -> str:
    """The one currency budgets and prices are in."""
    return conf.currency()


def teams_with_budgets() -> list[Team]:
    """Every team that has a budget (the enforcement pass)."""
    return list(Team.objects.filter(budget__isnull=False).order_by("slug"))


def showback_budgets(
    *, viewer: Actor, team: str | None = None, now: datetime | None = None
) -> list[dict[str, Any]]:
    """For each team the viewer sees that has a budget: its month, and spend, forecast and budget
    per day for the chart (as JSON-ready columns: day starts in epoch seconds, amounts or None)."""
    from portal.selectors import teams_visible

    now = now or timezone.now()
    teams = teams_visible(viewer).filter(budget__isnull=False)
    if team:
        teams = teams.filter(slug=team)
    out = []
    for t in teams:
        month = team_month(team=t, now=now)
        if month is None:
            continue
        series = team_month_series(month=month, now=now)

        def column(key: str, points: list[dict] = series) -> list[float | None]:
            return [None if p[key] is None else float(p[key]) for p in points]

        chart = {
            "days": [
                int(datetime.combine(p["day"], datetime.min.time(), UTC).timestamp())
                for p in series
            ],
            "spend": column("spend"),
            "forecast": column("forecast"),
            "budget": column("budget"),
            "currency": month.currency,
        }
        out.append(
            {"month": month, "series": series, "chart": chart, "chart_id": f"budget-data-{t.slug}"}
        )
    return out


def request_budget_preview(
    *, viewer: Actor, team_slug: str, hourly: Decimal, ttl_hours: int, now: datetime | None = None
) -> dict[str, Any] | None:
    """The request form's line: the estimate's cost this month against what the team has left
    after its forecast, and what submitting would meet (fits, needs an approver, refused).
    None when the team is not the viewer's to see or has no budget."""
    if not DNS_LABEL_RE.fullmatch(team_slug or ""):
        return None  # no team, or not a team's name (a form's raw value): nothing to look up
    try:
        team = team_for_budget(viewer=viewer, slug=team_slug)
    except NotFound:
        return None
    now = now or timezone.now()
    month = team_month(team=team, now=now)
    if month is None:
        return None
    f = month.figures
    cost = bm.request_month_cost(hourly=hourly, ttl_hours=ttl_hours, now=now)
    over = f.over_by(cost)
    outcome = "refused" if f.reached else ("over" if over > 0 else "fits")
    return {
        "team": team.slug,
        "currency": month.currency,
        "month": month.month,
        "month_cost": cost,
        "budget": f.budget,
        "spend": f.spend,
        "forecast": f.forecast,
        "left": max(f.remaining, Decimal("0.00")),
        "left_after": bm.money(f.remaining - cost),
        "over_by": over,
        "outcome": outcome,
    }


def environment_cost(*, environment: Environment, now: datetime | None = None) -> dict[str, Any]:
    """The environment page's cost story: what its nodes ran so far (showback's number), what it
    was priced so far (its hourly price for the hours it was up, its asleep price for the hours
    it slept), what it costs if it runs to its expiry (so far + the hours left as the budget's
    forecast prices them: `running_of`), and its team's budget month when there is one."""
    now = now or timezone.now()
    env = environment
    ran = environment_ran_cost(
        windows={env.pk: Window(env.namespace, env.created_at, env.deleted_at)}, now=now
    )[env.pk]
    so_far = bm.money(uptime.environment_priced(env, now=now).cost)
    running = Status(env.status) in SCHEDULED and env.expires_at is not None
    left = bm.hours_between(now, env.expires_at) if running else Decimal(0)
    to_expiry, awake_left = None, Decimal(0)
    if running:
        schedule = team_schedule(env.team)
        rest = running_of(env, _awake(schedule) if schedule is not None else None)
        to_expiry = bm.money(so_far + rest.cost(now, env.expires_at))
        awake_left = rest.hours(now, env.expires_at)
    return {
        "ran": ran,
        "so_far": so_far,
        "hours_left": left.quantize(Decimal("0.1")),
        # Of the hours left, those it will be awake and asleep (a schedule's, or asleep now).
        "awake_left": awake_left.quantize(Decimal("0.1")),
        "asleep_left": max(left - awake_left, Decimal(0)).quantize(Decimal("0.1")),
        "to_expiry": to_expiry,
        "team_month": team_month(team=env.team, now=now),
    }
