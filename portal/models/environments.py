"""Environment requests, environments, and the decisions and steps recorded on them."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models

from kiln.identity.models import Team
from kiln.validators import DNS_LABEL
from portal.lifecycle import label


class EnvClass(models.TextChoices):
    """How long-lived and how guarded an environment is."""

    EPHEMERAL = "ephemeral"
    DEV = "dev"
    STAGING = "staging"
    PROD = "prod"


class WorkloadClass(models.TextChoices):
    """Scheduling class of the environment's workloads (none means latency-sensitive)."""

    LATENCY_SENSITIVE = "latency-sensitive"
    STANDARD = "standard"
    BATCH = "batch"


def _new_public_id() -> str:
    """A new opaque environment id: `env_` and 16 lower-case letters and digits."""
    return "env_" + secrets.token_urlsafe(12).replace("-", "a").replace("_", "b").lower()


class EnvironmentRequest(models.Model):
    """What an engineer asked for; immutable once submitted (extensions live on the Environment)."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="environment_requests")
    name = models.CharField(max_length=40, validators=[DNS_LABEL])
    env_class = models.CharField(max_length=20, choices=EnvClass.choices)
    ttl_hours = models.PositiveIntegerField()
    workload_class = models.CharField(
        max_length=30, choices=WorkloadClass.choices, default=WorkloadClass.LATENCY_SENSITIVE
    )
    cpu = models.PositiveIntegerField(help_text="CPU cores")
    memory_gib = models.PositiveIntegerField()
    gpu = models.PositiveIntegerField(default=0)
    tenant_control_plane = models.BooleanField(default=False)
    spot_node_pool = models.BooleanField(default=False)
    database = models.BooleanField(default=False)
    justification = models.TextField(blank=True, default="")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="environment_requests"
    )
    idempotency_key = models.CharField(max_length=200, blank=True, default="")
    body_sha256 = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["requested_by", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="portal_request_idempotency_key",
            ),
            models.CheckConstraint(
                condition=models.Q(ttl_hours__gte=1), name="portal_request_ttl_pos"
            ),
            models.CheckConstraint(condition=models.Q(cpu__gte=1), name="portal_request_cpu_pos"),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name} ({self.env_class})"


class Environment(models.Model):
    """An environment and its place in the lifecycle (portal.lifecycle.TRANSITIONS)."""

    public_id = models.CharField(max_length=40, unique=True, default=_new_public_id, editable=False)
    request = models.OneToOneField(
        EnvironmentRequest, on_delete=models.PROTECT, related_name="environment"
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="environments")
    name = models.CharField(max_length=40)
    namespace = models.CharField(max_length=63)
    env_class = models.CharField(max_length=20, choices=EnvClass.choices)
    status = models.CharField(max_length=20, default="SUBMITTED", db_index=True)
    status_reason = models.TextField(blank=True, default="")
    policy_version = models.CharField(max_length=64, blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    manifests = models.JSONField(default=list, blank=True)
    applied_refs = models.JSONField(default=list, blank=True)
    datastore_pool = models.CharField(max_length=100, blank=True, default="")
    hourly_cost = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    # What sleeping keeps (the database claim) costs an hour: priced for the hours asleep.
    asleep_hourly_cost = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    teardown_deadline = models.DateTimeField(null=True, blank=True)
    quarantine_owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="quarantined_environments",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # The submitting request's W3C traceparent: the approval and the provisioning tasks continue
    # that trace, so every event from submission to READY carries one trace id.
    traceparent = models.CharField(max_length=55, blank=True, default="")
    # Disruption safety and idleness (portal/disruption.py, portal/services/expiry.py).
    deferred_until = models.DateTimeField(null=True, blank=True)
    deferral_reason = models.TextField(blank=True, default="")
    deferrals = models.PositiveIntegerField(default=0)
    expiry_warned_at = models.DateTimeField(null=True, blank=True)
    last_activity_at = models.DateTimeField(null=True, blank=True)
    idle_proposed_at = models.DateTimeField(null=True, blank=True)
    # Sleeping and waking (portal/services/sleep.py): what put it to sleep (owner, inactivity,
    # schedule, budget), since when it is asleep (None while awake or falling asleep), the
    # replicas its workloads had, and the current wake's request time and the last one's length.
    sleep_trigger = models.CharField(max_length=20, blank=True, default="")
    slept_at = models.DateTimeField(null=True, blank=True)
    sleep_memory = models.JSONField(default=dict, blank=True)
    wake_requested_at = models.DateTimeField(null=True, blank=True)
    woke_at = models.DateTimeField(null=True, blank=True)
    last_wake_seconds = models.FloatField(null=True, blank=True)
    # Every sleep, [asleep from, awake from] in ISO time, the last open while it sleeps: the
    # hours it ran leave them out (portal/uptime.py).
    sleeps = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["namespace"],
                condition=~models.Q(status__in=["DENIED", "REJECTED", "DELETED"]),
                name="portal_environment_live_namespace",
            )
        ]
        indexes = [
            models.Index(fields=["team", "status"], name="portal_env_team_status"),
            # A staging plan's previous version (services/plan.py): the team's latest earlier
            # environment of the same name, read from this index instead of every row the team
            # ever had, each one's manifests read to compare (a cost growing with its history).
            models.Index(
                fields=["team", "name", "created_at"], name="portal_env_team_name_created"
            ),
        ]

    def __str__(self) -> str:
        try:
            words = label(self.status, self.status_reason)
        except ValueError:  # a status this code does not know: as stored
            words = self.status
        return f"{self.namespace} [{words}]"


class ApprovalDecision(models.Model):
    """One approver's approve or reject on one environment request."""

    APPROVE = "approve"
    REJECT = "reject"

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="decisions")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True)
    approver_name = models.CharField(max_length=200)
    decision = models.CharField(max_length=10, choices=[(APPROVE, "approve"), (REJECT, "reject")])
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["environment", "approver_name"], name="portal_decision_once_per_approver"
            )
        ]

    def __str__(self) -> str:
        return f"{self.approver_name} {self.decision} {self.environment_id}"


class PolicyDecision(models.Model):
    """One policy's verdict on one object (the request or a composed manifest), with the file's hash."""

    REQUEST = "request"
    MANIFEST = "manifest"

    environment = models.ForeignKey(
        Environment, on_delete=models.CASCADE, related_name="policy_decisions"
    )
    stage = models.CharField(max_length=10, choices=[(REQUEST, "request"), (MANIFEST, "manifest")])
    policy = models.CharField(max_length=200)
    policy_sha256 = models.CharField(max_length=64, blank=True, default="")
    policy_set_version = models.CharField(max_length=64, blank=True, default="")
    target = models.CharField(max_length=300, blank=True, default="")
    allowed = models.BooleanField()
    outcome = models.CharField(max_length=20)  # allow | deny | error | timeout | missing
    message = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.policy} {self.outcome} {self.target}"


class ProvisioningStep(models.Model):
    """One step of provisioning or teardown; unique per environment so a retry reuses it."""

    PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"  # its statuses

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="steps")
    name = models.CharField(max_length=100)
    position = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=10, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    detail = models.TextField(blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["environment", "name"], name="portal_step_once")
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.status}"
