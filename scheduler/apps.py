from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    """Pricing, inventory and the kube-scheduler extender."""

    name = "scheduler"
    verbose_name = "Scheduler"
