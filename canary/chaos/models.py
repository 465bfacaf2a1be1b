"""Chaos tables: experiments, the lease that holds each one's fault, and every injection made under it.

The tables keep the names they had while chaos lived inside canary (`canary_chaos*`,
`Meta.db_table`): the move to the `chaos` app changed Django's state only, not one row.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class FaultKind(models.TextChoices):
    """The faults Kiln can inject."""

    POD_KILL = "pod-kill", "Pod kill"
    HTTP_DELAY = "http-delay", "HTTP delay"
    HTTP_ABORT = "http-abort", "HTTP abort"
    # Through Chaos Mesh, each with its own bounds (canary/chaos/kinds.py).
    NETWORK_DELAY = "network-delay", "Network delay"
    NETWORK_LOSS = "network-loss", "Network packet loss"
    NETWORK_PARTITION = "network-partition", "Network partition"
    CPU_STRESS = "cpu-stress", "CPU stress"
    MEMORY_STRESS = "memory-stress", "Memory stress"
    DNS_ERROR = "dns-error", "DNS errors"
    CLOCK_SKEW = "clock-skew", "Clock skew"


# The faults written into a service's routes (its VirtualService): for them, and only them,
# the experiment's Service is what is faulted; for the others it is where stops read metrics.
HTTP_FAULTS = frozenset({FaultKind.HTTP_DELAY, FaultKind.HTTP_ABORT})


class ExperimentStatus(models.TextChoices):
    """Lifecycle of an experiment; see `EXPERIMENT_TRANSITIONS`."""

    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    ABORTED = "aborted", "Aborted"
    EXPIRED = "expired", "Expired (hard maximum)"


EXPERIMENT_TRANSITIONS: dict[str, frozenset[str]] = {
    ExperimentStatus.PENDING: frozenset(
        {ExperimentStatus.RUNNING, ExperimentStatus.ABORTED, ExperimentStatus.EXPIRED}
    ),
    ExperimentStatus.RUNNING: frozenset(
        {ExperimentStatus.COMPLETED, ExperimentStatus.ABORTED, ExperimentStatus.EXPIRED}
    ),
    ExperimentStatus.COMPLETED: frozenset(),
    ExperimentStatus.ABORTED: frozenset(),
    ExperimentStatus.EXPIRED: frozenset(),
}
# The states nothing leaves, read off the table (as canary's ROLLOUT_TERMINAL_STATUSES is).
TERMINAL_STATUSES = frozenset(s for s, to in EXPERIMENT_TRANSITIONS.items() if not to)


class ChaosExperiment(models.Model):
    """A fault against a target (namespace + label selector), bounded by duration, hard maximum and blast radius."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100)
    team = models.ForeignKey(
        "kiln.Team", on_delete=models.PROTECT, related_name="chaos_experiments"
    )
    namespace = models.CharField(max_length=63)
    selector = models.JSONField(default=dict, help_text="matchLabels of the target pods")
    service = models.CharField(
        max_length=253, blank=True, default="", help_text="host of the target service (HTTP faults)"
    )
    fault = models.CharField(max_length=24, choices=FaultKind.choices)
    delay_ms = models.PositiveIntegerField(null=True, blank=True)
    abort_http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    percent = models.FloatField(default=100.0, help_text="share of requests faulted (HTTP faults)")
    params = models.JSONField(
        default=dict,
        blank=True,
        help_text="magnitude of a Chaos Mesh fault (canary/chaos/kinds.py)",
    )
    duration_seconds = models.PositiveIntegerField()
    max_duration_seconds = models.PositiveIntegerField(help_text="hard maximum, never exceeded")
    max_pods = models.PositiveIntegerField(null=True, blank=True)
    max_percent = models.FloatField(null=True, blank=True)
    stop_conditions = models.JSONField(default=list, blank=True)
    # A stop condition that cannot be evaluated (metrics source down or silent) aborts the
    # experiment unless it says it may run without them.
    continue_without_metrics = models.BooleanField(default=False)
    # Two experiments on overlapping targets run together only when both say they may.
    may_overlap = models.BooleanField(default=False)
    # A client's Idempotency-Key (API header, or the create form's hidden token), bound to the
    # body it first came with (body_sha256): a second submission is the same experiment.
    idempotency_key = models.CharField(max_length=200, blank=True, default="")
    body_sha256 = models.CharField(max_length=64, blank=True, default="")
    status = models.CharField(
        max_length=16, choices=ExperimentStatus.choices, default=ExperimentStatus.PENDING
    )
    end_reason = models.CharField(max_length=300, blank=True, default="")
    # What ended it, as data: the stop condition with the value read, or the lever engaged.
    end_evidence = models.JSONField(default=dict, blank=True)
    # Lease timings are fixed at creation so every controller and reaper agrees on them.
    lease_duration = models.FloatField()
    renew_deadline = models.FloatField()
    retry_period = models.FloatField()
    max_clock_skew = models.FloatField()
    revert_budget = models.FloatField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_by_name = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "canary_chaosexperiment"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status"], name="canary_chaos_exp_status")]
        constraints = [
            models.CheckConstraint(
                condition=Q(max_duration_seconds__gte=models.F("duration_seconds")),
                name="canary_chaos_exp_max_ge_duration",
            ),
            models.CheckConstraint(
                condition=Q(max_pods__isnull=False) | Q(max_percent__isnull=False),
                name="canary_chaos_exp_blast_radius",
            ),
            models.UniqueConstraint(
                fields=["created_by_name", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="chaos_exp_idempotency_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fault} in {self.namespace})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class LeverScope(models.TextChoices):
    """How far a safety lever reaches: every experiment, or one team's."""

    PLATFORM = "platform", "Platform"
    TEAM = "team", "Team"


class ChaosLever(models.Model):
    """A safety lever: while engaged, no experiment in its scope runs or starts.

    One row per scope (the platform's, each team's), kept across engagements: the last
    engagement and release stay on it, every one of them is in the audit chain.
    """

    scope = models.CharField(max_length=16, choices=LeverScope.choices)
    team = models.ForeignKey(
        "kiln.Team",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="chaos_levers",
    )
    engaged = models.BooleanField(default=False)
    engaged_by = models.CharField(max_length=200, blank=True, default="")
    engaged_reason = models.CharField(max_length=300, blank=True, default="")
    engaged_at = models.DateTimeField(null=True, blank=True)
    released_by = models.CharField(max_length=200, blank=True, default="")
    released_reason = models.CharField(max_length=300, blank=True, default="")
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(scope="platform") & Q(team__isnull=True))
                | (Q(scope="team") & Q(team__isnull=False)),
                name="chaos_lever_scope_team",
            ),
            models.UniqueConstraint(
                fields=["scope"], condition=Q(scope="platform"), name="chaos_lever_one_platform"
            ),
            models.UniqueConstraint(
                fields=["team"], condition=Q(scope="team"), name="chaos_lever_one_per_team"
            ),
        ]

    def __str__(self) -> str:
        where = "platform" if self.scope == LeverScope.PLATFORM else f"team {self.team_id}"
        return f"{where} lever ({'engaged' if self.engaged else 'released'})"


class ChaosLease(models.Model):
    """The lease on one experiment's fault; `resource_version` is the fencing token, bumped on every write."""

    experiment = models.OneToOneField(
        ChaosExperiment, on_delete=models.CASCADE, primary_key=True, related_name="lease"
    )
    holder = models.CharField(max_length=200, blank=True, default="")
    resource_version = models.PositiveBigIntegerField(default=0)
    acquired_at = models.DateTimeField(null=True, blank=True)
    renewed_at = models.DateTimeField(null=True, blank=True)
    renewals = models.PositiveIntegerField(default=0)
    transitions = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "canary_chaoslease"

    def __str__(self) -> str:
        return f"lease {self.experiment_id} held by {self.holder or 'nobody'} rv={self.resource_version}"


class InjectionState(models.TextChoices):
    """An injection is written before the fault is applied, so a crash in between is still reaped."""

    INJECTING = "injecting", "Injecting"
    ACTIVE = "active", "Active"
    REVERTED = "reverted", "Reverted"
    # Reverted as far as Kiln can, but the read-back still found the fault: a person's to check.
    UNCONFIRMED = "unconfirmed", "Revert unconfirmed"


class ChaosInjection(models.Model):
    """One application of an experiment's fault under one lease term; at most one unreverted per experiment."""

    experiment = models.ForeignKey(
        ChaosExperiment, on_delete=models.CASCADE, related_name="injections"
    )
    holder = models.CharField(max_length=200)
    fencing_token = models.PositiveBigIntegerField()
    state = models.CharField(
        max_length=16, choices=InjectionState.choices, default=InjectionState.INJECTING
    )
    applied = models.JSONField(default=list, help_text="refs of the objects applied")
    targets = models.JSONField(default=list, help_text="pods or hosts affected")
    created_at = models.DateTimeField(auto_now_add=True)
    injected_at = models.DateTimeField(null=True, blank=True)
    reverted_at = models.DateTimeField(null=True, blank=True)
    reverted_by = models.CharField(max_length=200, blank=True, default="")
    revert_reason = models.CharField(max_length=300, blank=True, default="")
    # Every revert is read back: None until reverted, then whether the fault was seen gone, after
    # how many attempts, and what was read back while it was not (canary/chaos/verify.py).
    revert_confirmed = models.BooleanField(null=True, blank=True)
    revert_attempts = models.PositiveSmallIntegerField(default=0)
    revert_evidence = models.JSONField(default=list, blank=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "canary_chaosinjection"
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["experiment"],
                condition=Q(reverted_at__isnull=True),
                name="canary_chaos_one_live_injection",
            )
        ]
        indexes = [models.Index(fields=["reverted_at"], name="canary_chaos_inj_reverted")]

    def __str__(self) -> str:
        return f"injection {self.pk} of {self.experiment_id} ({self.state})"


__all__ = [
    "EXPERIMENT_TRANSITIONS",
    "TERMINAL_STATUSES",
    "ChaosExperiment",
    "ChaosInjection",
    "ChaosLease",
    "ChaosLever",
    "ExperimentStatus",
    "FaultKind",
    "InjectionState",
    "LeverScope",
]
