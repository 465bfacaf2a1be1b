from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from kiln import observability
from scheduler import pools, scoring


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
        try:
            pools.parse_spread_k(settings.KILN_SCHEDULER_SPREAD_K)
        except pools.SpreadConfigError as exc:
            raise ImproperlyConfigured(f"KILN_SCHEDULER_SPREAD_K: {exc}") from exc
        # Not at the top: Django imports this module before any model, and the collector
        # imports the models, so the import waits for ready(), where Django says to make it.
        # The header search's node provider registers itself the same way (kiln.search).
        from scheduler import metrics, search  # noqa: F401

        observability.add_scrape_collector(metrics.CommitmentCollector())
