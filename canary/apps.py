from django.apps import AppConfig


class CanaryConfig(AppConfig):
    """Canary rollouts and chaos experiments."""

    name = "canary"
    verbose_name = "Canary and chaos"
