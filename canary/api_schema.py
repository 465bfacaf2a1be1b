"""Documented shapes of the canary and chaos APIs (canary/api.py, canary/chaos_api.py): what
`canary.selectors` and `experiment_payload` return, as serializers so the OpenAPI document
types every field.

They describe; they hold no rule. Services validate (and answer 400 with the reason); the
limits written here are theirs, documented for clients.
"""

from __future__ import annotations

from rest_framework import serializers

from canary.models import Arm, MetricsSource, RolloutStatus
from canary.models_chaos import ExperimentStatus, FaultKind, InjectionState
from kiln.openapi import paginated

EXPERIMENT_STATUSES = ExperimentStatus.values

# --- rollouts ------------------------------------------------------------------------------


class ServiceOutput(serializers.Serializer):
    """A service that rollouts shift traffic for."""

    id = serializers.UUIDField()
    team = serializers.CharField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    host = serializers.CharField()
    metrics_source = serializers.ChoiceField(choices=MetricsSource.values)
    sim_traffic_class = serializers.CharField()

    class Meta:
        ref_name = "CanaryService"


class RolloutServiceOutput(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    team = serializers.CharField()

    class Meta:
        ref_name = "RolloutService"


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

    class Meta:
        ref_name = "Rollout"


def _stat(help_text: str = "") -> serializers.FloatField:
    return serializers.FloatField(allow_null=True, help_text=help_text)


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

    class Meta:
        ref_name = "RolloutTick"


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

    class Meta:
        ref_name = "RolloutDecision"


class RolloutSeriesOutput(serializers.Serializer):
    """A rollout with every tick's statistics and every decision (`rollout_series`)."""

    rollout = RolloutOutput()
    ticks = TickOutput(many=True)
    decisions = DecisionOutput(many=True)

    class Meta:
        ref_name = "RolloutSeries"


class ObservationOutput(serializers.Serializer):
    """A pushed observation, queued for the next tick."""

    id = serializers.IntegerField()
    arm = serializers.ChoiceField(choices=Arm.values)
    requests = serializers.IntegerField(min_value=0)
    errors = serializers.IntegerField(min_value=0)
    samples = serializers.IntegerField(min_value=0, help_text="Latency samples kept.")

    class Meta:
        ref_name = "Observation"


# --- chaos experiments ---------------------------------------------------------------------


class MagnitudeOutput(serializers.Serializer):
    delay_ms = serializers.IntegerField(allow_null=True)
    abort_http_status = serializers.IntegerField(allow_null=True)
    percent = serializers.FloatField()

    class Meta:
        ref_name = "ExperimentMagnitude"


class BlastRadiusOutput(serializers.Serializer):
    max_pods = serializers.IntegerField(allow_null=True)
    max_percent = serializers.FloatField(allow_null=True)

    class Meta:
        ref_name = "ExperimentBlastRadius"


class StopConditionOutput(serializers.Serializer):
    kind = serializers.CharField()
    threshold = serializers.FloatField(required=False, allow_null=True)

    class Meta:
        ref_name = "ExperimentStopCondition"


class TimingsOutput(serializers.Serializer):
    """Lease timings fixed at creation, in seconds."""

    lease_duration = serializers.FloatField()
    renew_deadline = serializers.FloatField()
    retry_period = serializers.FloatField()
    max_clock_skew = serializers.FloatField()
    revert_budget = serializers.FloatField()

    class Meta:
        ref_name = "ExperimentTimings"


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

    class Meta:
        ref_name = "ExperimentLease"


class InjectionOutput(serializers.Serializer):
    """One application of the fault, fenced by the lease term that applied it."""

    id = serializers.IntegerField()
    holder = serializers.CharField()
    term = serializers.IntegerField(min_value=0)
    state = serializers.ChoiceField(choices=InjectionState.values)
    objects = serializers.ListField(child=serializers.JSONField())
    targets = serializers.ListField(child=serializers.JSONField())
    created_at = serializers.DateTimeField()
    injected_at = serializers.DateTimeField(allow_null=True)
    reverted_at = serializers.DateTimeField(allow_null=True)
    reverted_by = serializers.CharField(allow_blank=True)
    revert_reason = serializers.CharField(allow_blank=True)

    class Meta:
        ref_name = "ExperimentInjection"


class ExperimentOutput(serializers.Serializer):
    """A chaos experiment with its lease (`experiment_payload`)."""

    id = serializers.UUIDField()
    name = serializers.CharField()
    team = serializers.CharField()
    namespace = serializers.CharField()
    selector = serializers.DictField(child=serializers.CharField())
    service = serializers.CharField(allow_blank=True)
    fault = serializers.ChoiceField(choices=FaultKind.values)
    magnitude = MagnitudeOutput()
    duration_seconds = serializers.IntegerField(min_value=1)
    max_duration_seconds = serializers.IntegerField(min_value=1)
    blast_radius = BlastRadiusOutput()
    stop_conditions = StopConditionOutput(many=True)
    status = serializers.ChoiceField(choices=EXPERIMENT_STATUSES)
    end_reason = serializers.CharField(allow_blank=True)
    created_by = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    timings = TimingsOutput()
    lease = LeaseOutput()

    class Meta:
        ref_name = "Experiment"


class ExperimentDetailOutput(ExperimentOutput):
    """An experiment with its injections."""

    injections = InjectionOutput(many=True)

    class Meta:
        ref_name = "ExperimentDetail"


ExperimentPageOutput = paginated(ExperimentOutput, "ExperimentPage")
