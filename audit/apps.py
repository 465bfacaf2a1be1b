from django.apps import AppConfig


class AuditConfig(AppConfig):
    """Audit events, outbox, relay, single writer, hash chain, checkpoints, export, verify."""

    name = "audit"
    verbose_name = "Audit"

    def ready(self) -> None:
        # Imported once the app registry is ready (the runtime imports models), as Django asks.
        from audit import runtime
        from kiln import health, standalone

        health.register("audit_writer", runtime.writer_lag_check)
        standalone.add_service(runtime.relay_service)
        standalone.add_service(runtime.writer_service)
