"""The Celery application. Broker: Redis in production, the memory transport in standalone."""

import os

from celery import Celery

from kiln import celery_metrics, task_recovery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kiln.settings")

# Every task retries when its database connection fails under it (kiln/worker_db.py).
app = Celery("kiln", task_cls="kiln.worker_db:Task")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# A SIGKILLed worker's unacknowledged messages go back on the queue (kiln/task_recovery.py).
task_recovery.install(app)
# Task failures and queue depths; the worker's and beat's /metrics and probes (kiln/celery_metrics.py).
celery_metrics.install(app)
