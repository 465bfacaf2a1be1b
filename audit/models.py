"""Audit tables. The outbox row is written in the caller's transaction."""

from __future__ import annotations

import uuid

from django.db import models


class OutboxEvent(models.Model):
    """An audit event recorded beside the change it describes, awaiting publication to the topic."""

    event_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    recorded_at = models.DateTimeField()
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=200)
    target = models.CharField(max_length=300)
    data = models.JSONField(default=dict)
    trace_id = models.CharField(max_length=32, blank=True, default="")
    published_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["published_at", "id"], name="audit_outbox_pending")]

    def __str__(self) -> str:
        return f"{self.action} {self.target} by {self.actor}"
