"""Django admin for team budgets: platform admins set a team's monthly budget and raise it for
the month with a reason, through the budget services (audited like the API's)."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from kiln.admin_site import KilnModelAdmin, admin_actor
from kiln.identity import permissions
from kiln.widgets import decimal_text
from portal import conf
from portal.models import BudgetNotice, BudgetRaise, TeamBudget
from portal.services import budgets

MONEY_WIDGET = decimal_text()
MONEY_ERRORS = {
    "invalid": "Type an amount such as 1200 or 1200.50.",
    "max_digits": "At most 9999999999.99.",
    "max_whole_digits": "At most 9999999999.99.",
    "max_decimal_places": "At most two decimal places (cents).",
}


WARN_RANGE = "The warning percentage is from 1 to 100."


def _cleaned(form: forms.Form, fields: tuple[str, ...]) -> dict:
    """The form's cleaned values of `fields`: the service's keyword arguments."""
    return {name: form.cleaned_data[name] for name in fields}


class TeamBudgetForm(forms.ModelForm):
    """The monthly amount, in the platform's currency, and the warning percentage."""

    warn_percent = forms.IntegerField(
        initial=80,
        min_value=1,
        max_value=100,
        error_messages=dict.fromkeys(("min_value", "max_value"), WARN_RANGE),
    )

    class Meta:
        model = TeamBudget
        fields = ("team", "monthly_amount", "currency", "warn_percent")
        widgets = {"monthly_amount": MONEY_WIDGET}
        error_messages = {"monthly_amount": MONEY_ERRORS}

    def clean_currency(self) -> str:
        value = (self.cleaned_data.get("currency") or "").strip().upper()
        if value != conf.currency():
            raise forms.ValidationError(
                f"Budgets are in the platform's currency, {conf.currency()}."
            )
        return value

    def clean_monthly_amount(self):
        value = self.cleaned_data.get("monthly_amount")
        if value is not None and value < 0:
            raise forms.ValidationError("A budget cannot be negative.")
        team = self.cleaned_data.get("team") or getattr(self.instance, "team", None)
        if value is not None and team is not None and team.pk is not None:
            # The service's own check, said on the field instead of a 500 from save_model.
            if problem := budgets.room_problem(team=team, monthly_amount=value):
                raise forms.ValidationError(problem)
        return value


@admin.register(TeamBudget)
class TeamBudgetAdmin(KilnModelAdmin):
    """Teams' monthly budgets; set by platform admins through the service."""

    form = TeamBudgetForm
    list_display = ("team", "monthly_amount", "currency", "warn_percent", "updated_at")
    add_predicate = change_predicate = staticmethod(permissions.can_set_budget)

    def get_changeform_initial_data(self, request):
        return {"currency": conf.currency(), "warn_percent": 80}

    def save_model(self, request, obj, form, change) -> None:
        fields = ("monthly_amount", "currency", "warn_percent")
        saved = budgets.team_budget_set(
            actor=admin_actor(request), team=obj.team, **_cleaned(form, fields)
        )
        # As stored (1e5 typed is 100000.00): admin's confirmation names the object by it.
        obj.pk, obj.monthly_amount = saved.pk, saved.monthly_amount


class BudgetRaiseForm(forms.ModelForm):
    """A raise for this month: how much and why."""

    class Meta:
        model = BudgetRaise
        fields = ("team", "amount", "reason")
        widgets = {"amount": MONEY_WIDGET}
        error_messages = {"amount": MONEY_ERRORS}

    def clean(self):
        data = super().clean()
        # Field errors first: a field with an error is left out of the model's constraint
        # checks, which would otherwise name the database constraint to the person.
        amount = data.get("amount")
        if amount is not None and amount <= 0:
            self.add_error("amount", "A raise must be more than 0.")
        if not (data.get("reason") or "").strip():
            self.add_error("reason", "Say why the budget is raised.")
        team = data.get("team")
        if team is not None and not TeamBudget.objects.filter(team=team).exists():
            raise forms.ValidationError(f"Team {team.slug} has no budget to raise; set one first.")
        if team is not None and amount is not None and amount > 0:
            budget = TeamBudget.objects.get(team=team)
            # The service's own check, said on the field instead of a 500 from save_model.
            problem = budgets.room_problem(
                team=team, monthly_amount=budget.monthly_amount, more=amount
            )
            if problem:
                self.add_error("amount", problem)
        return data


@admin.register(BudgetRaise)
class BudgetRaiseAdmin(KilnModelAdmin):
    """Raises of a team's budget for one month, with their reasons; added, never changed."""

    form = BudgetRaiseForm
    list_display = ("team", "month", "amount", "raised_by_name", "reason", "created_at")
    list_filter = ("month", ("team", admin.RelatedOnlyFieldListFilter))
    add_predicate = staticmethod(permissions.can_set_budget)

    def save_model(self, request, obj, form, change) -> None:
        raised = budgets.team_budget_raise(
            actor=admin_actor(request), team=obj.team, **_cleaned(form, ("amount", "reason"))
        )
        obj.pk, obj.month, obj.raised_by_name = raised.pk, raised.month, raised.raised_by_name
        obj.amount = raised.amount  # as stored: "+100000.00", not the "+1E+5" typed


@admin.register(BudgetNotice)
class BudgetNoticeAdmin(KilnModelAdmin):
    """Thresholds of a team's budget crossed, once per month each; read-only."""

    list_display = ("team", "month", "threshold", "spend", "forecast", "budget", "created_at")
    list_filter = ("month", "threshold")
