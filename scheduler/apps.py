from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from scheduler import scoring


class SchedulerConfig(AppConfig):
    """Pricing, inventory and the kube-scheduler extender."""

    name = "scheduler"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        try:
            scoring.Weights(
                cost=settings.KILN_SCHEDULER_WEIGHT_COST,
                packing=settings.KILN_SCHEDULER_WEIGHT_PACKING,
                risk=settings.KILN_SCHEDULER_WEIGHT_RISK,
            )
        except scoring.WeightsError as exc:
            raise ImproperlyConfigured(f"KILN_SCHEDULER_WEIGHT_*: {exc}") from exc
        if settings.KILN_SCHEDULER_NODE_SOURCE not in {"simulated", "kubernetes", "none"}:
            raise ImproperlyConfigured(
                "KILN_SCHEDULER_NODE_SOURCE must be simulated, kubernetes or none, "
                f"not {settings.KILN_SCHEDULER_NODE_SOURCE!r}"
            )
