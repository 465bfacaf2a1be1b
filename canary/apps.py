from django.apps import AppConfig


class CanaryConfig(AppConfig):
    """Canary rollouts: services, traffic steps, sequential analysis; chaos is its own app."""

    name = "canary"
    verbose_name = "Canary"

    def ready(self) -> None:
        # The home page's panel registers itself (kiln.dashboard); it imports the models, so
        # it waits for ready(), where Django says to make such imports.
        from canary import attention, dashboard, search  # noqa: F401
