"""Celery tasks outlive a PostgreSQL restart (the `postgres` fault run of `manage.py loadtest`).

Two things went wrong when the run restarted PostgreSQL under load:

- A pool process kept its dead connection for good. CELERY_DB_REUSE_MAX keeps a worker's
  connection across tasks (Celery's Django fixup closes it only every 2,000 task signals, since
  closing it there closes the whole pool), and Django's check of a connection whose queries
  raised (`close_if_unusable_or_obsolete`, which the web runs as each request ends) never runs
  in a worker: every later task of that process failed, "the connection is closed", for the
  rest of the run. So after each task (`task_postrun`) a connection that raised and no longer
  answers is closed (given back to the pool, which drops it), as Django does after a request;
  a connection that raised nothing is not touched, so the fast path is unchanged.
- A task whose database went away was acknowledged as failed, its work left undone (a
  provisioning or teardown step until the reaper's next pass). `Task`, the base of every task
  (kiln.celery), retries instead on the errors of a connection lost or refused
  (django.db.OperationalError and InterfaceError): after 1, 2 and 4 seconds, within the task's
  `max_retries` (3 unless it says otherwise). Every task is idempotent (its service checks the
  current state first), and its transaction was rolled back with the connection.

A broker restart has its own gap. A task that sends its own next run (a provisioning or
teardown re-check, a retry) publishes to the broker from inside the worker, and Celery gives a
publish 0.6 s of retries by default; the load test's Redis restart (shut down, a second, start)
outlasts that, so a re-check sent in the gap raised, the task ended failed and acknowledged,
and its environment waited for the reaper's next pass over stalled work (a minute or more).
`Task.retry` and `Task.requeue` publish with REQUEUE_RETRY_POLICY instead: retries for about
half a minute, while nothing else can reach the worker anyway. A request of the web still
fails fast when it cannot send (its client retries, and the retry queues the task again).
"""

from __future__ import annotations

import functools
import logging

from celery import Celery
from celery import Task as CeleryTask
from celery.backends.base import DisabledBackend
from celery.result import AsyncResult
from celery.signals import task_postrun
from django.db import DatabaseError, InterfaceError, OperationalError, connections

from kiln import observability

log = logging.getLogger("kiln.celery")

# kombu's retry policy for a task's own next run: waits of 0.2, 0.7, 1.2, 1.7 and then 2 s, 20
# tries in about 36 s, then the publish raises and the reaper's pass is the way back.
REQUEUE_RETRY_POLICY = {
    "max_retries": 20,
    "interval_start": 0.2,
    "interval_step": 0.5,
    "interval_max": 2.0,
}


class Task(CeleryTask):
    """Every Kiln task: retried when the database connection fails under it.

    A task that keeps no result (`ignore_result`) is sent without Celery's result backend.
    Sending builds the call's AsyncResult from the backend, and Celery makes one backend per
    thread (`app.backend`). Under ASGI each request runs in a thread of its own, so every
    request that queued a task built a new Redis result backend (its connection pool, the
    client library's version looked up from package metadata) only to drop it. A sampled
    profile of the web under the load test showed it among the web's larger costs. Such a
    task's AsyncResult has the disabled backend instead: there is no result to ask for.
    """

    autoretry_for = (OperationalError, InterfaceError)
    retry_backoff = 1  # 1, 2, 4 ... seconds
    retry_jitter = False  # a restart takes a second or two: no retry at once

    def retry(self, *args: object, **options: object):  # noqa: ANN201 - Celery's signature
        """Celery's retry, its message published through a broker restart (REQUEUE_RETRY_POLICY)."""
        options.setdefault("retry_policy", REQUEUE_RETRY_POLICY)
        return super().retry(*args, **options)

    def apply_async(self, *args: object, **options: object):  # noqa: ANN201 - Celery's signature
        """Celery's apply_async, leaving the caller's trace context as it was if the publish
        raises (`observability.publishing`)."""
        with observability.publishing():
            return super().apply_async(*args, **options)

    def requeue(self, *args: object, countdown: float) -> None:
        """Send this task's next run with `args` in `countdown` seconds, published through a
        broker restart (REQUEUE_RETRY_POLICY)."""
        self.apply_async(args, countdown=countdown, retry_policy=REQUEUE_RETRY_POLICY)

    def AsyncResult(self, task_id: str, **kwargs: object) -> AsyncResult:  # noqa: N802 - Celery's name
        if not self.ignore_result:
            return super().AsyncResult(task_id, **kwargs)
        app = self._get_app()
        return app.AsyncResult(task_id, backend=_no_backend(app), task_name=self.name, **kwargs)


def send_keeping_no_result(app: Celery, name: str, **options: object) -> AsyncResult:
    """Send task `name` by its name (its module need not be imported in this process), as a
    task that keeps no result: no result backend made, no result subscribed to."""
    result = functools.partial(app.AsyncResult, backend=_no_backend(app))
    with observability.publishing():
        return app.send_task(name, ignore_result=True, result_cls=result, **options)


@functools.cache
def _no_backend(app: Celery) -> DisabledBackend:
    return DisabledBackend(app)


def close_broken_connections(**_: object) -> None:
    """Close this thread's connections whose queries raised and that no longer answer."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is None or not conn.errors_occurred:
            continue
        if conn.is_usable():
            conn.errors_occurred = False
            continue
        log.warning("closing the database connection %s: it no longer answers", conn.alias)
        try:
            conn.close()
        except DatabaseError:  # closing a dead connection may raise; it is dropped all the same
            pass


task_postrun.connect(close_broken_connections, weak=False)
