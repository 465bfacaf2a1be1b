from django.apps import AppConfig


class ChaosConfig(AppConfig):
    """Chaos experiments: leases, injections, the controller and the reaper."""

    name = "canary.chaos"
    label = "chaos"
    verbose_name = "Chaos"

    def ready(self) -> None:
        # The services queue the controller task by name (services/experiments.py): importing
        # the tasks registers them in every process, as the worker's autodiscovery does. Not at the top: Django imports this module
        # before the apps are ready, and ready() is where Django says to do such imports.
        from canary.chaos import attention, dashboard, search, tasks  # noqa: F401
        from canary.chaos.reaper import FaultsPastLeaseCollector, FaultsUnconfirmedCollector
        from canary.chaos.standalone import controllers_service
        from kiln import observability, standalone

        standalone.add_service(controllers_service)

        observability.add_scrape_collector(FaultsPastLeaseCollector(), kind="chaos-reaper")
        observability.add_scrape_collector(FaultsUnconfirmedCollector(), kind="chaos-reaper")
