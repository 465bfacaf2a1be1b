from django.apps import AppConfig


class PortalConfig(AppConfig):
    """Teams and environments."""

    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        # The services queue the portal's tasks by name (portal.services.queueing): importing
        # portal.tasks registers them in every process, as the worker's autodiscovery does.
        # Not at the top: Django imports this module before any model, and the tasks import
        # the models, so the import waits for ready(), where Django says to make it.
        # The home page's panels register the same way (kiln.dashboard).
        from portal import dashboard, tasks  # noqa: F401
