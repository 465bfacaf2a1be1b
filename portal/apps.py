from django.apps import AppConfig


class PortalConfig(AppConfig):
    """Teams and environments."""

    name = "portal"
    verbose_name = "Portal"
