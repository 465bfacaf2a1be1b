"""Team budgets: the monthly amount, its raises and the notices sent as spend nears it
(portal/services/budgets.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from kiln.identity.models import Team


class TeamBudget(models.Model):
    """A team's monthly budget in the platform's currency (KILN_CURRENCY); spend is what its
    environments' nodes ran, priced (scheduler/showback.py)."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="budget")
    monthly_amount = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3)
    warn_percent = models.PositiveSmallIntegerField(default=80)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__slug"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(monthly_amount__gte=0), name="portal_budget_amount_nonneg"
            ),
            models.CheckConstraint(
                condition=models.Q(warn_percent__gte=1) & models.Q(warn_percent__lte=100),
                name="portal_budget_warn_percent_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug}: {self.monthly_amount} {self.currency}/month"


class BudgetRaise(models.Model):
    """A platform admin's raise of one team's budget for one month (the month's first day), with
    the reason; a month's budget is the monthly amount plus that month's raises."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budget_raises")
    month = models.DateField()
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    reason = models.TextField()
    raised_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True)
    raised_by_name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["month", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(amount__gt=0), name="portal_budget_raise_positive"
            )
        ]

    def __str__(self) -> str:
        return f"{self.team.slug} +{self.amount} for {self.month:%Y-%m}"


class BudgetNotice(models.Model):
    """A threshold of a team's budget crossed in a month (the warning percentage, or 100 when
    the budget is reached): unique, so the team is told once per threshold per month."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budget_notices")
    month = models.DateField()
    threshold = models.PositiveSmallIntegerField()
    spend = models.DecimalField(max_digits=12, decimal_places=2)
    forecast = models.DecimalField(max_digits=12, decimal_places=2)
    budget = models.DecimalField(max_digits=12, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["month", "threshold"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "month", "threshold"], name="portal_budget_notice_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.team.slug} {self.threshold}% of {self.month:%Y-%m}"
