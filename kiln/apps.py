from celery.signals import worker_process_init
from django.apps import AppConfig
from django.conf import settings
from django.contrib.admin import apps as admin_apps

from kiln import heap, observability


def freeze_worker_heap(**_: object) -> None:
    """Each Celery pool process keeps what it was forked with out of full collections
    (kiln/heap.py)."""
    if settings.KILN_GC_FREEZE:
        heap.freeze_after()


class KilnConfig(AppConfig):
    """The project package as an app: commands, identity, observability."""

    name = "kiln"
    verbose_name = "Kiln"

    def ready(self) -> None:
        # Here, not at the top: this module is imported while Django builds the app registry,
        # and the receivers call identity services, which import models (not loadable yet).
        from kiln.identity import signals  # noqa: F401 - connects the login lockout receiver

        observability.setup()
        # Here, not in kiln/celery.py: that module is imported by Django-free ones (through the
        # package), and the receiver reads settings.
        worker_process_init.connect(freeze_worker_heap, dispatch_uid="kiln.freeze_worker_heap")


class KilnAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin whose default site asks kiln.identity.permissions who may enter."""

    default = False  # not the config of the `kiln` package itself
    default_site = "kiln.admin_site.KilnAdminSite"
