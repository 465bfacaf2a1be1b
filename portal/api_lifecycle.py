"""Lifecycle calls of the environments API: defer teardown past expiry (do-not-disrupt), keep an idle
one, put one to sleep and wake it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_serializer

from kiln.api_fields import StrictCharField
from portal import services
from portal.api import StrictIntegerField, StrictSerializer, action_api
from portal.services import sleep


@extend_schema_serializer(component_name="EnvironmentDefer")
class DeferInput(StrictSerializer):
    minutes = StrictIntegerField(min_value=1, max_value=525600)
    reason = StrictCharField(max_length=500)


@extend_schema_serializer(component_name="EnvironmentKeep")
class KeepInput(StrictSerializer):
    reason = StrictCharField(max_length=500, required=False, allow_blank=True, default="")


EnvironmentDeferApi = action_api("defer", DeferInput, services.environment_defer_teardown)
EnvironmentKeepApi = action_api("keep", KeepInput, services.environment_keep)


@extend_schema_serializer(component_name="EnvironmentSleep")
class SleepInput(StrictSerializer):
    reason = StrictCharField(max_length=500, required=False, allow_blank=True, default="")


EnvironmentSleepApi = action_api("sleep", SleepInput, sleep.sleep_environment)
EnvironmentWakeApi = action_api("wake", SleepInput, sleep.wake_environment)
