from django.apps import AppConfig

from kiln.cluster.simulated_tenant import set_audit_transport


class PortalConfig(AppConfig):
    """Teams and environments."""

    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        # The services queue the portal's tasks by name (portal.services.queueing): importing
        # portal.tasks registers them in every process, as the worker's autodiscovery does.
        # Not at the top: Django imports this module before any model, and the tasks import
        # the models, so the import waits for ready(), where Django says to make it.
        # The home page's panels register the same way (kiln.dashboard), and so does the
        # in-process transport of the simulated tenant API servers' audit batches: Kiln's own
        # sink service, what the HTTP view calls (kiln.cluster.simulated_tenant).
        from kiln import observability
        from portal import attention, dashboard, search, tasks  # noqa: F401
        from portal.metrics import ReaperBacklogCollector
        from portal.services.tenant_audit import tenant_audit_deliver

        set_audit_transport(tenant_audit_deliver)
        observability.add_scrape_collector(ReaperBacklogCollector(), kind="beat")
