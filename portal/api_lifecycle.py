"""Lifecycle calls of the environments API: defer teardown past expiry (do-not-disrupt), keep an idle
one, put one to sleep and wake it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_serializer

from kiln.api_fields import StrictCharField
from portal import services
from portal.api import EnvironmentActionApi, StrictIntegerField, StrictSerializer, _action_schema
from portal.services import sleep


@extend_schema_serializer(component_name="EnvironmentDefer")
class DeferInput(StrictSerializer):
    minutes = StrictIntegerField(min_value=1, max_value=525600)
    reason = StrictCharField(max_length=500)


@extend_schema_serializer(component_name="EnvironmentKeep")
class KeepInput(StrictSerializer):
    reason = StrictCharField(max_length=500, required=False, allow_blank=True, default="")


@_action_schema("environments_defer", DeferInput)
class EnvironmentDeferApi(EnvironmentActionApi):
    """POST: hold teardown `minutes` past expiry for a reason, within the class's maximum deferral."""

    InputSerializer = DeferInput
    act = staticmethod(services.environment_defer_teardown)


@_action_schema("environments_keep", KeepInput)
class EnvironmentKeepApi(EnvironmentActionApi):
    """POST: keep an environment proposed for early teardown as idle (team engineers)."""

    InputSerializer = KeepInput
    act = staticmethod(services.environment_keep)


@extend_schema_serializer(component_name="EnvironmentSleep")
class SleepInput(StrictSerializer):
    reason = StrictCharField(max_length=500, required=False, allow_blank=True, default="")


@_action_schema("environments_sleep", SleepInput)
class EnvironmentSleepApi(EnvironmentActionApi):
    """POST: put a READY environment to sleep (its team's engineers): workloads, control plane
    and nodes to zero, volumes and database kept. 409 for another status or a class that may
    not sleep."""

    InputSerializer = SleepInput
    act = staticmethod(sleep.sleep_environment)


@_action_schema("environments_wake", SleepInput)
class EnvironmentWakeApi(EnvironmentActionApi):
    """POST: wake a sleeping environment (its team's engineers); a no-op when it is awake, 409
    when it is being torn down or failed."""

    InputSerializer = SleepInput
    act = staticmethod(sleep.wake_environment)
