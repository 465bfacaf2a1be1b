"""Rollout API responses: the serializers that type every field the canary views answer.

`canary.selectors` builds the rollout shapes, which the dashboard's stream shares; these
describe them for clients and hold no rule.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from canary.models import Arm, MetricsSource, RolloutStatus
from kiln.openapi import TeamObjectOutput, paginated


@extend_schema_serializer(component_name="CanaryService")
class ServiceOutput(TeamObjectOutput):
    """A service that rollouts shift traffic for."""

    team = serializers.CharField(source="team.slug", help_text="The owning team's slug.")
    host = serializers.CharField()
    metrics_source = serializers.ChoiceField(choices=MetricsSource.values)
    sim_traffic_class = serializers.CharField()


@extend_schema_serializer(component_name="RolloutService")
class RolloutServiceOutput(TeamObjectOutput):
    """The service a rollout shifts traffic for."""


@extend_schema_serializer(component_name="Rollout")
class RolloutOutput(serializers.Serializer):
    """A rollout's state (`canary.selectors.rollout_summary`)."""

    id = serializers.UUIDField()
    service = RolloutServiceOutput()
    baseline_version = serializers.CharField()
    canary_version = serializers.CharField()
    steps = serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=100))
    ticks_per_step = serializers.IntegerField(min_value=1)
    tick_seconds = serializers.FloatField()
    status = serializers.ChoiceField(choices=RolloutStatus.values)
    weight = serializers.IntegerField(min_value=0, max_value=100, help_text="Canary traffic, %.")
    ticks_done = serializers.IntegerField(min_value=0)
    reason = serializers.CharField(allow_blank=True)
    finished = serializers.BooleanField()
    analysis = serializers.DictField(
        child=serializers.JSONField(),
        help_text="The latest analysis: bounds, CUSUM, per-channel sample sizes.",
    )
    requests_needed = serializers.FloatField(
        allow_null=True, help_text="Requests per arm that would likely settle it (inconclusive)."
    )
    minutes_needed = serializers.FloatField(allow_null=True)
    created_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


RolloutPageOutput = paginated(RolloutOutput, "RolloutPage")


def _stat(help_text: str = "") -> serializers.FloatField:
    return serializers.FloatField(allow_null=True, help_text=help_text)


@extend_schema_serializer(component_name="RolloutTick")
class TickOutput(serializers.Serializer):
    """One analysis tick's statistics (null where the window had no evidence)."""

    tick = serializers.IntegerField(min_value=0)
    weight = serializers.IntegerField(min_value=0, max_value=100)
    action = serializers.CharField()
    canary_error_rate = _stat()
    baseline_error_rate = _stat()
    llr = _stat("SPRT log-likelihood ratio")
    llr_lower = _stat()
    llr_upper = _stat()
    cusum = _stat("CUSUM statistic of latency")
    cusum_median = _stat()
    cusum_tail = _stat()
    cusum_threshold = _stat()
    requests_needed = _stat()
    minutes_needed = _stat()
    settle = serializers.CharField(allow_blank=True)
    empty = serializers.BooleanField(help_text="A window without traffic or metrics: no evidence.")
    canary_p50_ms = _stat()
    baseline_p50_ms = _stat()
    canary_p99_ms = _stat()
    baseline_p99_ms = _stat()
    reason = serializers.CharField(allow_blank=True)


@extend_schema_serializer(component_name="RolloutDecision")
class DecisionOutput(serializers.Serializer):
    """A state-changing decision: who, which weight change, why."""

    id = serializers.IntegerField()
    tick = serializers.IntegerField(min_value=0)
    kind = serializers.CharField()
    actor = serializers.CharField()
    from_weight = serializers.IntegerField(min_value=0, max_value=100)
    to_weight = serializers.IntegerField(min_value=0, max_value=100)
    reason = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField()


@extend_schema_serializer(component_name="RolloutSeries")
class RolloutSeriesOutput(serializers.Serializer):
    """A rollout with every tick's statistics and every decision (`rollout_series`)."""

    rollout = RolloutOutput()
    ticks = TickOutput(many=True)
    decisions = DecisionOutput(many=True)


@extend_schema_serializer(component_name="Observation")
class ObservationOutput(serializers.Serializer):
    """A pushed observation, queued for the next tick."""

    id = serializers.IntegerField()
    arm = serializers.ChoiceField(choices=Arm.values)
    requests = serializers.IntegerField(min_value=0)
    errors = serializers.IntegerField(min_value=0)
    samples = serializers.IntegerField(min_value=0, help_text="Latency samples kept.")
