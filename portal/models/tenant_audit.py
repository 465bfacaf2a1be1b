"""What a tenant API server's audit webhook presents and sends: its token's hash and its events."""

from __future__ import annotations

from django.db import models

from portal.models.environments import Environment


class TenantAuditToken(models.Model):
    """The bearer token a tenant API server's audit webhook presents: only its SHA-256 is kept."""

    environment = models.OneToOneField(
        Environment, on_delete=models.PROTECT, related_name="tenant_audit_token"
    )
    token_sha256 = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"sink token of {self.environment_id}"


class TenantAuditEvent(models.Model):
    """One archived tenant audit event, append-only; `running_sha256` folds every earlier one, and
    each accepted batch's last running hash is in Kiln's chain (portal/tenant_audit.py)."""

    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="tenant_audit_events"
    )
    seq = models.PositiveIntegerField()
    audit_id = models.CharField(max_length=64)
    event = models.JSONField()
    event_sha256 = models.CharField(max_length=64)
    running_sha256 = models.CharField(max_length=64)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["environment", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["environment", "seq"], name="portal_tenant_audit_seq"),
            models.UniqueConstraint(
                fields=["environment", "audit_id"], name="portal_tenant_audit_id"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.environment_id}#{self.seq} {self.audit_id}"
