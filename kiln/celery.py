"""The Celery application. Broker: Redis in production, the memory transport in standalone."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kiln.settings")

app = Celery("kiln")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
