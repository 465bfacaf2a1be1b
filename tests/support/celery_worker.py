"""A Celery worker inside the test process, on a thread pool.

Not on the `solo` pool, which `celery.contrib.testing` defaults to: building a solo pool sends
`worker_process_init` in the calling thread, as a forked child would, and Celery's Django fixup
answers it by closing the file descriptors of that thread's database connections without
telling them. The test's connection then held a number the next socket or file opened took
over: a worker's Redis connection, a module's compiled file read back empty. That was the
suite's stray descriptor close (tests/kiln/test_in_process_worker.py keeps it away).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.worker import WorkController
from django.db import connections


@contextmanager
def in_process_worker(app: Celery, *, shutdown_timeout: float = 10) -> Iterator[WorkController]:
    """Run `app`'s worker in a thread of this process, one task at a time, until the block ends."""
    with start_worker(
        app,
        pool="threads",
        concurrency=1,
        perform_ping_check=False,
        loglevel="WARNING",
        shutdown_timeout=shutdown_timeout,
    ) as worker:
        try:
            yield worker
        finally:
            # The pool's one thread keeps the connection its tasks opened: closed there, or the
            # test database could not be dropped at the end ("accessed by other users").
            worker.pool.executor.submit(connections.close_all).result(timeout=shutdown_timeout)
