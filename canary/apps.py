from django.apps import AppConfig


class CanaryConfig(AppConfig):
    """Canary rollouts: services, traffic steps, sequential analysis; chaos is its own app."""

    name = "canary"
    verbose_name = "Canary"
