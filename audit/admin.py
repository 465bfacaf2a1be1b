"""Django admin: the chain, checkpoints and verification runs, read-only (the database forbids edits)."""

from django.contrib import admin

from audit.models import ChainEvent, Checkpoint, OutboxEvent, VerificationRun
from kiln.admin_site import KilnModelAdmin
from kiln.identity.permissions import can_view_audit


class ReadOnlyAdmin(KilnModelAdmin):
    """No add, change or delete: audit records are evidence. Who sees them is the audit rule
    (kiln.identity.visibility.AUDIT, through can_view_audit), as on the explorer and the API."""

    view_predicate = staticmethod(can_view_audit)


@admin.register(ChainEvent)
class ChainEventAdmin(ReadOnlyAdmin):
    list_display = ("seq", "recorded_at", "actor", "action", "target")
    list_filter = ("action",)
    search_fields = ("actor", "action", "target", "event_id")


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ("size", "signed_at", "head_hash", "anchored")


@admin.register(VerificationRun)
class VerificationRunAdmin(ReadOnlyAdmin):
    list_display = ("finished_at", "ok", "checked", "first_bad_seq")


@admin.register(OutboxEvent)
class OutboxEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "recorded_at", "action", "published_at")
