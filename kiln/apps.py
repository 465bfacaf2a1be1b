from django.apps import AppConfig


class KilnConfig(AppConfig):
    """The project package as an app: commands, identity, observability."""

    name = "kiln"
    verbose_name = "Kiln"

    def ready(self) -> None:
        from kiln import observability

        observability.setup()
