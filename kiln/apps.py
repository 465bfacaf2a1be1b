from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps

from kiln import observability


class KilnConfig(AppConfig):
    """The project package as an app: commands, identity, observability."""

    name = "kiln"
    verbose_name = "Kiln"

    def ready(self) -> None:
        # Here, not at the top: this module is imported while Django builds the app registry,
        # and the receivers call identity services, which import models (not loadable yet).
        from kiln.identity import signals  # noqa: F401 - connects the login lockout receiver

        observability.setup()


class KilnAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin whose default site asks kiln.identity.permissions who may enter."""

    default = False  # not the config of the `kiln` package itself
    default_site = "kiln.admin_site.KilnAdminSite"
