"""Canary tables: services, rollouts with their traffic steps, analysis ticks and decisions.

Chaos tables belong to the `chaos` app (`canary/chaos/models.py`).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from kiln.identity.models import Team
from kiln.validators import DNS_LABEL


class MetricsSource(models.TextChoices):
    """Where a service's per-arm metrics come from."""

    SIMULATED = "simulated", "Simulated cluster"
    PROMETHEUS = "prometheus", "Prometheus HTTP API"
    PUSH = "push", "Push endpoint"


class Service(models.Model):
    """A team's service released through canary rollouts, routed by an Istio VirtualService."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="canary_services")
    name = models.CharField(max_length=63, validators=[DNS_LABEL])
    namespace = models.CharField(max_length=63, validators=[DNS_LABEL])
    host = models.CharField(
        max_length=253, help_text="The host Istio routes, e.g. checkout.shop.svc"
    )
    metrics_source = models.CharField(
        max_length=20, choices=MetricsSource.choices, default=MetricsSource.SIMULATED
    )
    # Prometheus: an allowlisted base URL ("" = KILN_PROMETHEUS_URL) and canary.promql templates.
    prometheus_url = models.URLField(blank=True, default="")
    queries = models.JSONField(default=dict, blank=True)
    # Simulated cluster: the traffic class of `canary.simulated_traffic` and per-version regressions.
    sim_traffic_class = models.CharField(max_length=40, default="steady")
    sim_regressions = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="canary_service_unique")
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class RolloutStatus(models.TextChoices):
    """Lifecycle of a rollout; see `ROLLOUT_TRANSITIONS`."""

    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    INCONCLUSIVE = "inconclusive", "Inconclusive"
    PROMOTED = "promoted", "Promoted"
    ROLLED_BACK = "rolled_back", "Rolled back"
    ABORTED = "aborted", "Aborted"
    FAILED = "failed", "Failed"


# The rollout state machine. INCONCLUSIVE (the analysis ran out of time or evidence)
# holds the canary at its weight until a person promotes anyway, aborts, retries the
# analysis or extends it (both back to RUNNING). Verbs audited per transition:
# started, promoted, rolled_back, aborted, failed, inconclusive, retried, extended.
ROLLOUT_TRANSITIONS: dict[str, frozenset[str]] = {
    RolloutStatus.PENDING: frozenset(
        {RolloutStatus.RUNNING, RolloutStatus.ABORTED, RolloutStatus.FAILED}
    ),
    RolloutStatus.RUNNING: frozenset(
        {
            RolloutStatus.PROMOTED,
            RolloutStatus.ROLLED_BACK,
            RolloutStatus.INCONCLUSIVE,
            RolloutStatus.ABORTED,
            RolloutStatus.FAILED,
        }
    ),
    RolloutStatus.INCONCLUSIVE: frozenset(
        {
            RolloutStatus.PROMOTED,
            RolloutStatus.ABORTED,
            RolloutStatus.RUNNING,
            RolloutStatus.FAILED,
        }
    ),
    RolloutStatus.PROMOTED: frozenset(),
    RolloutStatus.ROLLED_BACK: frozenset(),
    RolloutStatus.ABORTED: frozenset(),
    RolloutStatus.FAILED: frozenset(),
}
# Ticking: the analysis loop works on these.
ACTIVE_STATUSES = frozenset({RolloutStatus.PENDING, RolloutStatus.RUNNING})
# Finished: no way out (derived from the table, not listed twice).
ROLLOUT_TERMINAL_STATUSES = frozenset(s for s, to in ROLLOUT_TRANSITIONS.items() if not to)
# Holding traffic on the canary: at most one such rollout per service.
ROLLOUT_OPEN_STATUSES = frozenset(ROLLOUT_TRANSITIONS) - ROLLOUT_TERMINAL_STATUSES


class Rollout(models.Model):
    """Moving a service from a baseline to a canary version through traffic steps."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    service = models.ForeignKey(Service, on_delete=models.PROTECT, related_name="rollouts")
    baseline_version = models.CharField(max_length=63, validators=[DNS_LABEL])
    canary_version = models.CharField(max_length=63, validators=[DNS_LABEL])
    steps = models.JSONField(help_text="Canary weights in percent, increasing, ending at 100")
    ticks_per_step = models.PositiveIntegerField(default=8)
    tick_seconds = models.FloatField(default=60.0)
    config = models.JSONField(default=dict, blank=True, help_text="AnalysisConfig overrides")
    status = models.CharField(
        max_length=20, choices=RolloutStatus.choices, default=RolloutStatus.PENDING
    )
    weight = models.PositiveSmallIntegerField(default=0, help_text="Canary traffic now, percent")
    ticks_done = models.PositiveIntegerField(default=0)
    next_tick_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    # The analysis: the latest statistics (sample sizes included), the tick it (re)started
    # after (a retry starts afresh), and ticks a person added to its max duration.
    analysis = models.JSONField(default=dict, blank=True)
    analysis_start = models.PositiveIntegerField(default=0)
    extra_ticks = models.PositiveIntegerField(default=0)
    seed = models.BigIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "next_tick_at"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(weight__lte=100), name="canary_rollout_weight_percent"
            )
        ]

    def __str__(self) -> str:
        return f"{self.service} {self.baseline_version}->{self.canary_version}"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def is_finished(self) -> bool:
        """Promoted, rolled back, aborted or failed: nothing will change any more."""
        return self.status in ROLLOUT_TERMINAL_STATUSES


class RolloutTick(models.Model):
    """One analysis tick: the evidence read, the traffic weight it was read at, the verdict."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="ticks")
    number = models.PositiveIntegerField()
    weight = models.PositiveSmallIntegerField()
    evidence = models.JSONField()
    decision = models.JSONField()
    action = models.CharField(max_length=20)
    trace_id = models.CharField(max_length=32, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rollout", "number"]
        constraints = [
            models.UniqueConstraint(fields=["rollout", "number"], name="canary_tick_once")
        ]

    def __str__(self) -> str:
        return f"{self.rollout_id} tick {self.number}: {self.action}"


class RolloutDecision(models.Model):
    """A decision that changed a rollout: started, step advanced, promoted, rolled back, aborted."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="decisions")
    tick = models.PositiveIntegerField(default=0)
    kind = models.CharField(max_length=30)
    actor = models.CharField(max_length=200)
    from_weight = models.PositiveSmallIntegerField()
    to_weight = models.PositiveSmallIntegerField()
    reason = models.TextField()
    statistics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rollout", "created_at", "id"]

    def __str__(self) -> str:
        return f"{self.rollout_id} {self.kind} at tick {self.tick}"

    @property
    def kind_words(self) -> str:
        """The decision in words, as the dashboard shows it: "step advanced" (the API keeps `kind`)."""
        return self.kind.replace("_", " ")


class RolloutRoute(models.Model):
    """The traffic a decision ordered (an intent): committed with it, applied after, then marked.

    No cluster write happens inside the transaction that locks the rollout: the intent
    commits with its decision, the VirtualService (and, on the start, the DestinationRule)
    is applied outside it, and `applied_at` is set last. One left unapplied by a crash is
    applied again by the rollout's next tick or the beat's sweep; applying is idempotent.
    """

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="routes")
    decision = models.OneToOneField(RolloutDecision, on_delete=models.CASCADE, related_name="route")
    weight = models.PositiveSmallIntegerField()
    subsets = models.BooleanField(default=False, help_text="Apply the DestinationRule too")
    created_at = models.DateTimeField(auto_now_add=True)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["rollout", "id"]
        indexes = [
            models.Index(
                fields=["rollout"],
                condition=models.Q(applied_at__isnull=True),
                name="canary_route_unapplied",
            )
        ]

    def __str__(self) -> str:
        state = "applied" if self.applied_at else "pending"
        return f"{self.rollout_id} route {self.weight}% ({state})"


class Arm(models.TextChoices):
    """Which version served the traffic."""

    BASELINE = "baseline", "Baseline"
    CANARY = "canary", "Canary"


class Observation(models.Model):
    """Metrics pushed for one arm of a rollout; consumed by the next analysis tick."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="observations")
    arm = models.CharField(max_length=10, choices=Arm.choices)
    requests = models.PositiveIntegerField()
    errors = models.PositiveIntegerField()
    latencies_ms = models.JSONField(default=list, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True, help_text="End of the window")
    received_at = models.DateTimeField(auto_now_add=True)
    consumed_tick = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["rollout", "received_at", "id"]
        indexes = [models.Index(fields=["rollout", "consumed_tick"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(errors__lte=models.F("requests")),
                name="canary_observation_errors_le_requests",
            )
        ]

    def __str__(self) -> str:
        return f"{self.rollout_id} {self.arm} {self.errors}/{self.requests}"

    @property
    def samples(self) -> int:
        """Latency samples kept for this window."""
        return len(self.latencies_ms)
