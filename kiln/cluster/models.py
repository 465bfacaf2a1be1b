"""The simulated cluster's tables: its objects and the failures injected into it.

They belong to the `cluster` app (this package) and keep the tables they were
created with (`portal_simulatedobject`, `portal_simulatedfailure`): the move
from `portal` changed Django's state only, not a row (see
`migrations/0001_initial.py` and docs/cluster.md).
"""

from __future__ import annotations

from django.db import models


class SimulatedObject(models.Model):
    """One object of the simulated cluster, shared by every process through the database.

    `ready_at` None means the object never becomes ready; `finalizers_clear_at`
    None while `deletion_timestamp` is set means a finalizer that never clears.
    `cluster` is "" for the host cluster and `<namespace>/<name>` for the API server of
    that TenantControlPlane: its objects go when the control plane does.
    """

    cluster = models.CharField(max_length=507, blank=True, default="")
    api_version = models.CharField(max_length=200)
    kind = models.CharField(max_length=100)
    namespace = models.CharField(max_length=253, blank=True, default="")
    name = models.CharField(max_length=253)
    uid = models.UUIDField(unique=True)
    manifest = models.JSONField(default=dict)
    status = models.JSONField(default=dict, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    finalizers = models.JSONField(default=list, blank=True)
    generation = models.PositiveIntegerField(default=1)
    resource_version = models.PositiveBigIntegerField(default=1)
    field_manager = models.CharField(max_length=100, default="kiln")
    # When `field_manager` last changed the object (managedFields' `time`); status writes and
    # bindings by the simulated controllers move `updated_at` only.
    applied_at = models.DateTimeField(null=True, blank=True)
    failure = models.CharField(max_length=30, blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    ready_at = models.DateTimeField(null=True, blank=True)
    deletion_timestamp = models.DateTimeField(null=True, blank=True)
    finalizers_clear_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "portal_simulatedobject"
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "api_version", "kind", "namespace", "name"],
                name="portal_simobject_key",
            )
        ]
        indexes = [
            models.Index(fields=["kind", "namespace"], name="portal_simobject_kind_ns"),
            # The deleting objects a reconcile removes once their finalizers clear: read from
            # this index, not by a scan of every object in the cluster.
            models.Index(
                fields=["cluster", "finalizers_clear_at"],
                condition=models.Q(deletion_timestamp__isnull=False),
                name="portal_simobject_deleting",
            ),
        ]

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


class SimulatedFailure(models.Model):
    """A failure injected into the simulated cluster for objects matching its fields ("" = any)."""

    NEVER_READY = "never_ready"
    STUCK_FINALIZER = "stuck_finalizer"
    APPLY_ERROR = "apply_error"
    DEGRADED = "degraded"
    MODES = [
        (NEVER_READY, "never becomes ready"),
        (STUCK_FINALIZER, "finalizer never clears"),
        (APPLY_ERROR, "apply fails (retryable)"),
        (DEGRADED, "reports a failure"),
    ]

    mode = models.CharField(max_length=30, choices=MODES)
    api_version = models.CharField(max_length=200, blank=True, default="")
    kind = models.CharField(max_length=100, blank=True, default="")
    namespace = models.CharField(max_length=253, blank=True, default="")
    name = models.CharField(max_length=253, blank=True, default="")
    remaining = models.PositiveIntegerField(
        null=True, blank=True, help_text="How many more times it fires; empty means always."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "portal_simulatedfailure"
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.mode} on {self.kind or '*'} {self.namespace or '*'}/{self.name or '*'}"
