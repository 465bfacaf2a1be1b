"""A team's sleep schedule over the API: read it, set it, remove it (/api/v1/teams/<slug>/sleep-schedule/)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from kiln.api_fields import StrictCharField, StrictSerializer
from kiln.errors import NotFound
from kiln.identity.drf import HasKilnRole
from kiln.identity.permissions import actor_from_request, can_view_environment
from kiln.identity.selectors import team_get
from kiln.openapi import errors
from portal.api import StrictBooleanField
from portal.models import SleepSchedule
from portal.services import sleep_triggers


@extend_schema_serializer(component_name="SleepWindow")
class WindowSerializer(StrictSerializer):
    days = serializers.ListField(child=StrictCharField(max_length=3), allow_empty=False)
    start = StrictCharField(max_length=5)
    end = StrictCharField(max_length=5)


@extend_schema_serializer(component_name="SleepScheduleSet")
class ScheduleInput(StrictSerializer):
    time_zone = StrictCharField(max_length=64)
    wake_windows = WindowSerializer(many=True, allow_empty=True)
    sleep_windows = WindowSerializer(many=True, required=False, default=list)
    enabled = StrictBooleanField(required=False, default=True)


@extend_schema_serializer(component_name="SleepSchedule")
class ScheduleOutput(serializers.Serializer):
    team = serializers.CharField()
    time_zone = serializers.CharField()
    wake_windows = WindowSerializer(many=True)
    sleep_windows = WindowSerializer(many=True)
    enabled = serializers.BooleanField()
    asleep_hours_per_day = serializers.FloatField(allow_null=True)


def _payload(row: SleepSchedule) -> dict:
    return {
        "team": row.team.slug,
        "time_zone": row.time_zone,
        "wake_windows": row.wake_windows,
        "sleep_windows": row.sleep_windows,
        "enabled": row.enabled,
        "asleep_hours_per_day": sleep_triggers.asleep_hours_per_day(row.team_id),
    }


class TeamSleepScheduleApi(APIView):
    """GET, PUT, DELETE a team's sleep schedule: whoever sees the team's environments reads it;
    its engineers (and platform admins) set it. An unknown time zone or no waking window is a
    400 naming the field."""

    permission_classes = [HasKilnRole]

    def _team(self, request: Request, slug: str):
        actor = actor_from_request(request)
        team = team_get(viewer=actor, slug=slug)
        if not can_view_environment(actor, team.slug):
            raise NotFound(f"No team {slug!r}.")
        return actor, team

    @extend_schema(
        operation_id="teams_sleep_schedule_get",
        responses={200: ScheduleOutput, **errors(404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        _, team = self._team(request, slug)
        row = SleepSchedule.objects.filter(team=team).select_related("team").first()
        if row is None:
            raise NotFound(f"Team {slug!r} has no sleep schedule.")
        return Response(_payload(row))

    @extend_schema(
        operation_id="teams_sleep_schedule_set",
        request=ScheduleInput,
        responses={200: ScheduleOutput, **errors(400, 403, 404)},
    )
    def put(self, request: Request, slug: str) -> Response:
        actor, team = self._team(request, slug)
        data = ScheduleInput(data=request.data)
        data.is_valid(raise_exception=True)
        row = sleep_triggers.sleep_schedule_set(actor=actor, team=team, **data.validated_data)
        return Response(_payload(row))

    @extend_schema(
        operation_id="teams_sleep_schedule_delete",
        responses={200: ScheduleOutput, **errors(403, 404)},
    )
    def delete(self, request: Request, slug: str) -> Response:
        """Remove the schedule; answers the schedule removed."""
        actor, team = self._team(request, slug)
        row = SleepSchedule.objects.filter(team=team).select_related("team").first()
        if row is None:
            raise NotFound(f"Team {slug!r} has no sleep schedule.")
        removed = _payload(row)
        sleep_triggers.sleep_schedule_delete(actor=actor, team=team)
        return Response({**removed, "asleep_hours_per_day": None})
