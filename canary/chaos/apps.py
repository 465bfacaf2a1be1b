from django.apps import AppConfig


class ChaosConfig(AppConfig):
    """Chaos experiments: leases, injections, the controller and the reaper."""

    name = "canary.chaos"
    label = "chaos"
    verbose_name = "Chaos"
