from django.apps import AppConfig


class ChaosConfig(AppConfig):
    """Chaos experiments: leases, injections, the controller and the reaper."""

    name = "canary.chaos"
    label = "chaos"
    verbose_name = "Chaos"

    def ready(self) -> None:
        # Rollouts write the VirtualServices faults live in, and the simulated cluster's
        # traffic suffers them: canary asks through canary.extensions, since it cannot import
        # this app back (chaos stands on canary). The services queue the controller task by
        # name (services/experiments.py): importing the tasks registers them in every process,
        # as the worker's autodiscovery does. Not at the top: Django imports this module
        # before the apps are ready, and ready() is where Django says to do such imports.
        from canary import extensions
        from canary.chaos import attention, dashboard, search, tasks  # noqa: F401
        from canary.chaos.actuators import apply_keeping_faults, fault_effect
        from canary.chaos.reaper import FaultsPastLeaseCollector
        from kiln import observability

        extensions.install(writer=apply_keeping_faults, faults=fault_effect)
        observability.add_scrape_collector(FaultsPastLeaseCollector(), kind="chaos-reaper")
