from django.apps import AppConfig

from kiln import health, observability, standalone


class AuditConfig(AppConfig):
    """Audit events, outbox, relay, single writer, hash chain, checkpoints, export, verify."""

    name = "audit"
    verbose_name = "Audit"

    def ready(self) -> None:
        # Not at the top: Django imports this module before any model, and the runtime imports
        # the models (through the writer, the relay and the selectors), so the import waits
        # for ready(), where Django says to make it.
        from audit.chain import metrics, runtime
        from audit.home import attention, dashboard  # noqa: F401 - register the home card and items

        health.register("audit_writer", runtime.writer_lag_check)
        observability.add_scrape_collector(metrics.AuditLagCollector(), kind="audit-writer")
        standalone.add_service(runtime.relay_service)
        standalone.add_service(runtime.writer_service)
