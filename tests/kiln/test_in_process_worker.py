"""The tests' in-process Celery worker leaves the test's own database connection alone."""

from __future__ import annotations

import os

import pytest
from django.db import connection

from kiln.celery import app
from tests.support.celery_worker import in_process_worker


def _socket_of(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.mark.django_db(transaction=True)
def test_starting_the_worker_keeps_the_test_connections_descriptor():
    connection.ensure_connection()
    fd = connection.connection.fileno()
    before = _socket_of(fd)
    with in_process_worker(app):
        assert _socket_of(fd) == before  # the solo pool had closed it, and Redis took the number
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
