"""The Celery application. Broker: Redis in production, the memory transport in standalone."""

import os

from celery import Celery
from celery.signals import worker_process_init
from django.conf import settings

from kiln import heap, task_recovery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kiln.settings")

# Every task retries when its database connection fails under it (kiln/worker_db.py).
app = Celery("kiln", task_cls="kiln.worker_db:Task")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# A SIGKILLed worker's unacknowledged messages go back on the queue (kiln/task_recovery.py).
task_recovery.install(app)


@worker_process_init.connect
def freeze_worker_heap(**_: object) -> None:
    """Each pool process keeps what it was forked with out of full collections (kiln/heap.py)."""
    if settings.KILN_GC_FREEZE:
        heap.freeze_after()
