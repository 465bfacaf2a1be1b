"""Team budgets: set one, raise it for the month, check a request against it, and the pass that
tells teams of thresholds crossed and, at the budget, puts their idle environments to sleep.

- Setting a budget and raising it are platform admins' acts (`can_set_budget`), audited as
  `portal.budget.set` and `portal.budget.raised`; a raise needs a reason and holds for the
  month it is made in. Money is Decimal in the platform's one currency (KILN_CURRENCY).
- A request is checked before anything is written (`budget_check_request`): when the team's
  spend has reached its budget it is refused (`BudgetExhausted`, 409, with spend, forecast and
  budget; the refusal is on record as `portal.budget.request_refused`); when its cost this month
  would take the forecast over, it needs an approver even in a class approved automatically,
  and the queue shows by how much.
- The pass (`budgets_enforce`, run by beat) records each threshold once per month
  (`portal.budget.threshold_crossed`, a BudgetNotice row, a post to the team's webhook) and,
  while spend is at the budget, sleeps the team's READY environments idle for
  KILN_BUDGET_IDLE_SECONDS through the sleep pipeline, one at a time, outside any transaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

import audit
from kiln.errors import Conflict, Forbidden, InvalidInput, KilnError
from kiln.identity.models import Team
from kiln.identity.permissions import Actor, can_set_budget, system_actor
from portal import budget_math as bm
from portal import budget_reads, conf
from portal.lifecycle import Status
from portal.models import BudgetNotice, BudgetRaise, Environment, TeamBudget
from portal.services.notices import team_notification_queue
from portal.services.sleep import BUDGET, sleep_environment

log = logging.getLogger("kiln.portal.budgets")
KEEPER = "budget-keeper"
MAX_AMOUNT = Decimal("9999999999.99")  # what DecimalField(12, 2) holds


class BudgetExhausted(Conflict):
    """The team's spend has reached its budget: new requests are refused until it is raised or
    the month ends."""

    code = "budget_exhausted"


def _team_target(team: Team) -> str:
    return f"kiln.team:{team.slug}"


def _invalid(field: str, message: str) -> InvalidInput:
    return InvalidInput("The request is invalid.", extra={"fields": {field: [message]}})


def _amount(value: Any, field: str, *, positive: bool) -> Decimal:
    """A money amount as Decimal: two decimal places at most, not negative (or > 0)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise _invalid(field, "Not a decimal amount.")
    try:  # a JSON number's shortest text is what the client wrote: no binary float digits
        amount = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise _invalid(field, "Not a decimal amount.") from None
    if not amount.is_finite():
        raise _invalid(field, "Not a decimal amount.")
    if amount < 0:
        raise _invalid(field, "A budget cannot be negative.")
    # Before rounding: 1e40 has more digits than a Decimal context holds to quantize it.
    if amount > MAX_AMOUNT:
        raise _invalid(field, f"At most {MAX_AMOUNT}.")
    if amount != amount.quantize(bm.CENTS):
        raise _invalid(field, "At most two decimal places.")
    if positive and amount == 0:
        raise _invalid(field, "A raise must be more than 0.")
    return bm.money(amount)


def raised_this_month(team: Team, now: datetime | None = None) -> Decimal:
    """The sum of this month's raises of `team`'s budget."""
    month, _ = bm.month_bounds(now or timezone.now())
    total = BudgetRaise.objects.filter(team=team, month=month.date()).aggregate(t=Sum("amount"))
    return total["t"] or Decimal(0)


def room_problem(*, team: Team, monthly_amount: Decimal, more: Decimal = Decimal(0)) -> str | None:
    """Why a month's budget with its raises (and `more` raised now) cannot be stored, or None:
    together they must fit what a budget notice keeps (MAX_AMOUNT). Forms ask it first."""
    room = MAX_AMOUNT - monthly_amount - raised_this_month(team)
    if more > room or room < 0:
        return (
            f"This month's budget with its raises may come to at most {MAX_AMOUNT}: "
            f"at most {max(room, Decimal(0)):.2f} more."
        )
    return None


def _currency(value: Any) -> str:
    platform = conf.currency()
    given = str(value or platform).strip().upper()
    if given != platform:
        raise _invalid("currency", f"Budgets are in the platform's currency, {platform}.")
    return platform


def _warn_percent(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise _invalid("warn_percent", "A whole percentage from 1 to 100.")
    return value


def team_budget_set(
    *,
    actor: Actor,
    team: Team,
    monthly_amount: Any,
    currency: Any = None,
    warn_percent: Any = 80,
) -> TeamBudget:
    """Set (or change) a team's monthly budget; platform admins only; audited."""
    if not can_set_budget(actor):
        raise Forbidden("only platform admins set budgets")
    amount = _amount(monthly_amount, "monthly_amount", positive=False)
    currency = _currency(currency)
    warn = _warn_percent(warn_percent)
    with transaction.atomic():
        budget = TeamBudget.objects.select_for_update().filter(team=team).order_by("pk").first()
        previous = None
        if budget is None:
            budget = TeamBudget(team=team)
        else:
            previous = {
                "monthly_amount": budget.monthly_amount,
                "warn_percent": budget.warn_percent,
            }
        if problem := room_problem(team=team, monthly_amount=amount):
            raise _invalid("monthly_amount", problem)
        budget.monthly_amount, budget.currency, budget.warn_percent = amount, currency, warn
        budget.save()
        audit.record(
            actor,
            "portal.budget.set",
            _team_target(team),
            {
                "monthly_amount": amount,
                "currency": currency,
                "warn_percent": warn,
                "previous": previous,
            },
        )
    return budget


def team_budget_raise(
    *, actor: Actor, team: Team, amount: Any, reason: Any, now: datetime | None = None
) -> BudgetRaise:
    """Raise a team's budget for this month by `amount`, for a reason; platform admins only;
    audited. A team without a budget has nothing to raise (409)."""
    if not can_set_budget(actor):
        raise Forbidden("only platform admins raise budgets")
    reason = str(reason or "").strip()
    if not reason:
        raise _invalid("reason", "Say why the budget is raised.")
    value = _amount(amount, "amount", positive=True)
    now = now or timezone.now()
    month, _ = bm.month_bounds(now)
    with transaction.atomic():
        budget = TeamBudget.objects.select_for_update().filter(team=team).order_by("pk").first()
        if budget is None:
            raise Conflict(f"team {team.slug} has no budget to raise; set one first")
        # The month's budget with its raises is stored too (a notice keeps it): it must fit.
        if problem := room_problem(team=team, monthly_amount=budget.monthly_amount, more=value):
            raise _invalid("amount", problem)
        raised = BudgetRaise.objects.create(
            team=team,
            month=month.date(),
            amount=value,
            reason=reason,
            raised_by_id=actor.user_id,
            raised_by_name=actor.username,
        )
        audit.record(
            actor,
            "portal.budget.raised",
            _team_target(team),
            {
                "month": month.date(),
                "amount": value,
                "reason": reason,
                "currency": budget.currency,
                "monthly_amount": budget.monthly_amount,
            },
        )
    return raised


@dataclass(frozen=True)
class RequestBudget:
    """What a request meets: the team's month and the request's cost in it."""

    month: budget_reads.TeamMonth
    month_cost: Decimal
    over_by: Decimal

    @property
    def needs_approval(self) -> bool:
        """Its cost this month takes the forecast over the budget."""
        return self.over_by > 0

    def as_dict(self) -> dict[str, Any]:
        """The audit event's and the queue's figures."""
        f = self.month.figures
        return {
            "currency": self.month.currency,
            "budget": f.budget,
            "spend": f.spend,
            "forecast": f.forecast,
            "request_month_cost": self.month_cost,
            "over_by": self.over_by,
        }


def budget_check_request(
    *, actor: Actor, team: Team, hourly: Decimal, ttl_hours: int, now: datetime | None = None
) -> RequestBudget | None:
    """The budget a new request meets (None: the team has none). Raises BudgetExhausted when the
    team's spend has reached its budget, after putting the refusal on record."""
    now = now or timezone.now()
    month = budget_reads.team_month(team=team, now=now)
    if month is None:
        return None
    f = month.figures
    cost = bm.request_month_cost(hourly=hourly, ttl_hours=ttl_hours, now=now)
    if f.reached:
        figures = {
            "team": team.slug,
            "currency": month.currency,
            "spend": str(f.spend),
            "forecast": str(f.forecast),
            "budget": str(f.budget),
            "request_month_cost": str(cost),
        }
        with transaction.atomic():
            audit.record(actor, "portal.budget.request_refused", _team_target(team), figures)
        raise BudgetExhausted(
            f"team {team.slug} has spent {f.spend} {month.currency} of its {f.budget} "
            f"{month.currency} budget this month (forecast {f.forecast}); new requests are "
            "refused until a platform admin raises it or the month ends",
            extra=figures,
        )
    return RequestBudget(month=month, month_cost=cost, over_by=f.over_by(cost))


def budget_approval_reason(check: RequestBudget) -> str:
    """The words an approver reads on a request that would go over its team's budget."""
    return (
        f"forecast over budget by {check.over_by} {check.month.currency} "
        f"(forecast {check.month.figures.forecast} + this request {check.month_cost} "
        f"against {check.month.figures.budget})"
    )


# --- the pass -------------------------------------------------------------------------------


def _tell(*, team: Team, month: budget_reads.TeamMonth, threshold: int) -> bool:
    """Record one threshold crossed (once per month: the unique row decides), audit it and post
    to the team's webhook, in one transaction. False when it was told already."""
    f = month.figures
    reached = threshold >= bm.REACHED
    text = (
        f"{team.slug} has spent {f.spend} {month.currency} of its {f.budget} {month.currency} "
        f"budget for {month.month:%B %Y} ({f.percent_spent}%); forecast {f.forecast}. "
        + (
            "Idle environments are put to sleep and new requests are refused."
            if reached
            else f"At {f.budget} new requests are refused."
        )
    )
    try:
        with transaction.atomic():
            BudgetNotice.objects.create(
                team=team,
                month=month.month.date(),
                threshold=threshold,
                spend=f.spend,
                forecast=f.forecast,
                budget=f.budget,
            )
            audit.record(
                system_actor(KEEPER),
                "portal.budget.threshold_crossed",
                _team_target(team),
                {
                    "month": month.month.date(),
                    "threshold": threshold,
                    "currency": month.currency,
                    "spend": f.spend,
                    "forecast": f.forecast,
                    "budget": f.budget,
                },
            )
            team_notification_queue(
                team=team, kind="budget_reached" if reached else "budget_warning", text=text
            )
    except IntegrityError:
        return False  # a concurrent pass told it first
    return True


def _idle(env: Environment, now: datetime) -> bool:
    since = env.last_activity_at or env.ready_at or env.created_at
    return since + timedelta(seconds=conf.budget_idle_seconds()) <= now


def _sleep_idle(*, team: Team, now: datetime, dry_run: bool) -> list[str]:
    """Put the team's idle READY environments to sleep, each through the sleep pipeline."""
    slept = []
    for env in Environment.objects.filter(team=team, status=Status.READY).select_related("team"):
        if not _idle(env, now):
            continue
        slept.append(env.public_id)
        if dry_run:
            continue
        try:
            sleep_environment(
                env,
                actor=system_actor(KEEPER),
                reason=f"team {team.slug} reached its budget for {now:%B %Y}",
                trigger=BUDGET,
            )
        except KilnError as exc:  # one that cannot sleep (its class forbids it) stays up
            slept.pop()
            log.info("budget: %s not put to sleep: %s", env.namespace, exc.message)
    return slept


def budgets_enforce(*, now: datetime | None = None, dry_run: bool = False) -> dict[str, Any]:
    """Tell each team with a budget of the thresholds it crossed this month (once each) and, at
    the budget, put its idle environments to sleep. Changes nothing for a team that crossed
    nothing new and has nothing idle to sleep."""
    now = now or timezone.now()
    out: dict[str, Any] = {"told": {}, "slept": {}}
    for team in budget_reads.teams_with_budgets():
        month = budget_reads.team_month(team=team, now=now)
        if month is None:
            continue
        told = budget_reads.budget_notices(team=team, month=month.month)
        crossed = bm.thresholds_crossed(figures=month.figures, told=told)
        if crossed:
            out["told"][team.slug] = crossed
        if not dry_run:
            for threshold in crossed:
                _tell(team=team, month=month, threshold=threshold)
        if month.figures.reached:
            slept = _sleep_idle(team=team, now=now, dry_run=dry_run)
            if slept:
                out["slept"][team.slug] = slept
    return out
