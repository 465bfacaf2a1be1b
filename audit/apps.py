from django.apps import AppConfig


class AuditConfig(AppConfig):
    """Audit events, outbox, relay, single writer, hash chain, checkpoints, export, verify."""

    name = "audit"
    verbose_name = "Audit"
