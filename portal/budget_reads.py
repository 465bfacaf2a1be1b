"""Budget reads: a team's month (budget, spend, forecast), its chart series and the budget a
request would meet. Arithmetic in portal/budget_math.py; spend from scheduler/showback.py, the
same node-hours, priced, that showback reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.utils import timezone

from kiln.errors import NotFound
from kiln.identity.models import Team
from kiln.identity.permissions import Actor
from portal import budget_math as bm
from portal import conf
from portal.lifecycle import Status
from portal.models import BudgetNotice, BudgetRaise, Environment, TeamBudget
from scheduler.showback import Window, environment_ran_cost

# What keeps costing until it expires or is torn down: approved and on its way up, or up. A
# sleeping environment's nodes are gone: it costs nothing until it wakes.
RUNNING = frozenset(
    {Status.APPROVED, Status.PROVISIONING, Status.READY}
    | {s for s in Status if s.value == "WAKING"}
)


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


def awake_hours(environment: Environment):
    """The hours an environment runs in a span, its sleeping schedule applied, or None when it
    has none (awake throughout)."""
    del environment  # no schedule to apply: every hour until its expiry counts
    return None


def team_running(*, team: Team, now: datetime) -> list[bm.Running]:
    """What keeps costing: each running environment's hourly price until its expiry."""
    return [
        bm.Running(hourly=e.hourly_cost, until=e.expires_at, awake=awake_hours(e))
        for e in Environment.objects.filter(team=team, status__in=[s.value for s in RUNNING])
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


def pending_over_budget(*, environment: Environment, now: datetime | None = None) -> Decimal | None:
    """How far approving this pending request would take its team's forecast over the budget,
    or None when it would not (or the team has no budget): what the approval queue shows."""
    month = team_month(team=environment.team, now=now)
    if month is None:
        return None
    extra = bm.request_month_cost(
        hourly=environment.hourly_cost,
        ttl_hours=environment.request.ttl_hours,
        now=now or timezone.now(),
    )
    over = month.figures.over_by(extra)
    return over if over > 0 else None


def platform_currency() -> str:
    """The one currency budgets and prices are in."""
    return conf.currency()


def teams_with_budgets() -> list[Team]:
    """Every team that has a budget (the enforcement pass)."""
    return list(Team.objects.filter(budget__isnull=False).order_by("slug"))
