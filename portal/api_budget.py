"""Team budgets API (/api/v1/teams/<slug>/budget/): read the month, set the budget, raise it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from kiln.api_fields import StrictCharField, StrictSerializer
from kiln.errors import NotFound
from kiln.identity.drf import HasKilnRole
from kiln.identity.models import Team
from kiln.identity.permissions import actor_from_request
from kiln.openapi import errors
from portal import budget_reads
from portal.api import StrictIntegerField
from portal.services import budgets

MONEY_SCHEMA = {
    "oneOf": [
        {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]{1,2})?$"},
        {"type": "number"},
    ],
    "description": "An amount in the platform's currency, at most two decimal places; a "
    "decimal string keeps it exact.",
}


@extend_schema_field(MONEY_SCHEMA)
class MoneyField(serializers.Field):
    """An amount as sent (decimal string or JSON number): the service checks and converts it,
    naming the field when it is not a non-negative amount with at most two decimals."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> str:
        return str(value)


@extend_schema_serializer(component_name="TeamBudgetSet")
class BudgetSetInput(StrictSerializer):
    monthly_amount = MoneyField()
    currency = StrictCharField(max_length=3, required=False, default=None, allow_null=True)
    warn_percent = StrictIntegerField(required=False, default=80, min_value=1, max_value=100)


@extend_schema_serializer(component_name="TeamBudgetRaise")
class BudgetRaiseInput(StrictSerializer):
    amount = MoneyField()
    reason = StrictCharField(max_length=2000)  # required and not blank, as the service says


@extend_schema_serializer(component_name="TeamBudgetRaiseRecord")
class BudgetRaiseOutput(serializers.Serializer):
    amount = serializers.CharField(help_text="A decimal string in the budget's currency.")
    reason = serializers.CharField()
    raised_by = serializers.CharField(help_text="Who raised it (a user name).")
    at = serializers.DateTimeField()


@extend_schema_serializer(component_name="TeamBudget")
class BudgetOutput(serializers.Serializer):
    """A team's budget month: every amount a decimal string in `currency`."""

    team = serializers.CharField(help_text="The team's slug.")
    month = serializers.DateField(help_text="The month's first day (UTC).")
    currency = serializers.CharField(help_text="The platform's one currency (ISO 4217).")
    monthly_amount = serializers.CharField()
    raised = serializers.CharField(help_text="This month's raises, summed.")
    budget = serializers.CharField(help_text="monthly_amount + raised.")
    spend = serializers.CharField(help_text="Node-hours run this month, priced (as showback).")
    forecast = serializers.CharField(help_text="spend + what runs, priced to the month's end.")
    remaining = serializers.CharField(help_text="budget - forecast (negative: over).")
    percent_spent = serializers.IntegerField()
    warn_percent = serializers.IntegerField()
    state = serializers.ChoiceField(choices=["ok", "warning", "over", "reached"])
    raises = BudgetRaiseOutput(many=True)


def _month_body(team) -> dict:
    month = budget_reads.team_month(team=team)
    if month is None:
        raise NotFound(f"team {team.slug} has no budget")
    return month.as_dict()


def _change(request, slug: str, body: type[StrictSerializer], change: Callable[..., Any]) -> Team:
    """Validate `body`, find the team (as the actor sees it) and apply `change` to its budget."""
    actor = actor_from_request(request)
    data = body(data=request.data)
    data.is_valid(raise_exception=True)
    team = budget_reads.team_for_budget(viewer=actor, slug=slug)
    change(actor=actor, team=team, **data.validated_data)
    return team


class TeamBudgetApi(APIView):
    """GET: the team's budget month (who sees its environments). PUT: set its monthly budget
    (platform admins)."""

    permission_classes = [HasKilnRole]

    @extend_schema(
        operation_id="teams_budget_retrieve", responses={200: BudgetOutput, **errors(404)}
    )
    def get(self, request, slug: str):
        team = budget_reads.team_for_budget(viewer=actor_from_request(request), slug=slug)
        return Response(_month_body(team))

    @extend_schema(
        operation_id="teams_budget_update",
        request=BudgetSetInput,
        responses={200: BudgetOutput, **errors(404)},
    )
    def put(self, request, slug: str):
        team = _change(request, slug, BudgetSetInput, budgets.team_budget_set)
        return Response(_month_body(team))


class TeamBudgetRaiseApi(APIView):
    """POST: raise the team's budget for this month by `amount`, with a reason (platform admins)."""

    permission_classes = [HasKilnRole]

    @extend_schema(
        operation_id="teams_budget_raise",
        request=BudgetRaiseInput,
        responses={201: BudgetOutput, **errors(404, 409)},
    )
    def post(self, request, slug: str):
        team = _change(request, slug, BudgetRaiseInput, budgets.team_budget_raise)
        return Response(_month_body(team), status=201)
