"""Celery options set for a block and then given back to the settings.

A key written on `app.conf` goes into its `changes`, which come before the Django settings
Celery otherwise reads live: writing the old value back would pin it there for the rest of the
process, and a later test's `settings.CELERY_...` would no longer reach Celery.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kiln.celery import app

_ABSENT = object()


@contextmanager
def celery_conf(**values: Any) -> Iterator[None]:
    """Set these `app.conf` options for the block; afterwards `app.conf` is as it was."""
    changes = app.conf.changes
    before = {key: changes.get(key, _ABSENT) for key in values}
    for key, value in values.items():
        setattr(app.conf, key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is _ABSENT:
                changes.pop(key, None)
            else:
                changes[key] = value
