"""Documented shapes of the chaos API (canary/chaos/api.py): what `experiment_payload` returns,
as serializers so the OpenAPI document types every field.

They describe; they hold no rule. Services validate (and answer 400 with the reason); the
limits written here are theirs, documented for clients.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from canary.chaos.leases import TIMING_FIELDS
from canary.chaos.models import ExperimentStatus, FaultKind, InjectionState
from kiln.openapi import TeamObjectOutput, documented, paginated

EXPERIMENT_STATUSES = ExperimentStatus.values
INJECTION_STATES = InjectionState.values  # the schema's InjectionStateEnum


@extend_schema_serializer(component_name="ExperimentMagnitude")
class MagnitudeOutput(serializers.Serializer):
    delay_ms = serializers.IntegerField(allow_null=True)
    abort_http_status = serializers.IntegerField(allow_null=True)
    percent = serializers.FloatField()


@extend_schema_serializer(component_name="ExperimentBlastRadius")
class BlastRadiusOutput(serializers.Serializer):
    max_pods = serializers.IntegerField(allow_null=True)
    max_percent = serializers.FloatField(allow_null=True)


@extend_schema_serializer(component_name="ExperimentStopCondition")
class StopConditionOutput(serializers.Serializer):
    kind = serializers.CharField()
    threshold = serializers.FloatField(required=False, allow_null=True)


# One number a timing, named as LeaseTimings names them (TIMING_FIELDS), as the payload writes
# them: a timing added to the lease shows in the schema without a second list to keep in step.
TimingsOutput = extend_schema_serializer(component_name="ExperimentTimings")(
    type(
        "TimingsOutput",
        (serializers.Serializer,),
        {
            "__doc__": "Lease timings fixed at creation, in seconds.",
            "__module__": __name__,
            **{name: serializers.FloatField() for name in TIMING_FIELDS},
        },
    )
)


@extend_schema_serializer(component_name="ExperimentLease")
class LeaseOutput(serializers.Serializer):
    """The live lease: a fault exists only while it is held."""

    holder = serializers.CharField(allow_blank=True)
    held = serializers.BooleanField()
    term = serializers.IntegerField(min_value=0)
    resource_version = serializers.IntegerField(min_value=0)
    renewals = serializers.IntegerField(min_value=0)
    acquired_at = serializers.DateTimeField(allow_null=True)
    renewed_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    seconds_left = serializers.FloatField(allow_null=True)


@extend_schema_serializer(component_name="ExperimentInjection")
class InjectionOutput(serializers.Serializer):
    """One application of the fault, fenced by the lease term that applied it."""

    # Read from a ChaosInjection row.
    id = serializers.IntegerField()
    holder = serializers.CharField()
    term = serializers.IntegerField(min_value=0, source="fencing_token")
    state = serializers.ChoiceField(choices=INJECTION_STATES)
    objects = serializers.ListField(child=serializers.JSONField(), source="applied")
    targets = serializers.ListField(child=serializers.JSONField())
    created_at = serializers.DateTimeField()
    injected_at = serializers.DateTimeField(allow_null=True)
    reverted_at = serializers.DateTimeField(allow_null=True)
    reverted_by = serializers.CharField(allow_blank=True)
    revert_reason = serializers.CharField(allow_blank=True)
    # Every revert is read back (canary/chaos/verify.py): null until reverted, false while the
    # fault was still seen after every attempt (revert_evidence says what was read back).
    revert_confirmed = serializers.BooleanField(allow_null=True)
    revert_attempts = serializers.IntegerField(min_value=0)
    revert_evidence = serializers.ListField(child=serializers.JSONField())
    confirmed_at = serializers.DateTimeField(allow_null=True)


@extend_schema_serializer(component_name="Experiment")
class ExperimentOutput(TeamObjectOutput):
    """A chaos experiment with its lease (`experiment_payload`)."""

    selector = serializers.DictField(child=serializers.CharField())
    service = serializers.CharField(allow_blank=True)
    fault = serializers.ChoiceField(choices=FaultKind.values)
    magnitude = MagnitudeOutput()
    params = documented(
        serializers.DictField(child=serializers.JSONField()),
        type="object",
        description="The magnitude of a Chaos Mesh fault kind (latency_ms, loss_percent, ...).",
    )
    duration_seconds = serializers.IntegerField(min_value=1)
    max_duration_seconds = serializers.IntegerField(min_value=1)
    blast_radius = BlastRadiusOutput()
    stop_conditions = StopConditionOutput(many=True)
    continue_without_metrics = serializers.BooleanField()
    may_overlap = serializers.BooleanField()
    status = serializers.ChoiceField(choices=EXPERIMENT_STATUSES)
    end_reason = serializers.CharField(allow_blank=True)
    end_evidence = serializers.JSONField(
        help_text="What ended it: the stop condition with the value read, or the lever."
    )
    created_by = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    timings = TimingsOutput()
    lease = LeaseOutput()


@extend_schema_serializer(component_name="ExperimentDetail")
class ExperimentDetailOutput(ExperimentOutput):
    """An experiment with its injections."""

    injections = InjectionOutput(many=True)


ExperimentPageOutput = paginated(ExperimentOutput, "ExperimentPage")


@extend_schema_serializer(component_name="ChaosLever")
class LeverOutput(serializers.Serializer):
    """A safety lever: while engaged, no experiment in its scope runs or starts."""

    scope = serializers.ChoiceField(choices=["platform", "team"])
    team = serializers.CharField(allow_null=True)
    engaged = serializers.BooleanField()
    engaged_by = serializers.CharField(allow_blank=True)
    engaged_reason = serializers.CharField(allow_blank=True)
    engaged_at = serializers.DateTimeField(allow_null=True)
    released_by = serializers.CharField(allow_blank=True)
    released_reason = serializers.CharField(allow_blank=True)
    released_at = serializers.DateTimeField(allow_null=True)
