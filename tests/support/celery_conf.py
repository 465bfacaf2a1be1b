"""Celery options set for a block and then given back to the settings.

A key written on `app.conf` goes into its `changes`, which come before the Django settings
Celery otherwise reads live: writing the old value back would pin it there for the rest of the
process, and a later test's `settings.CELERY_...` would no longer reach Celery.

A broker named for the block is the one the block publishes to: the app's connection and
producer pools (made once, from the broker of the moment) are dropped on the way in and out,
as Celery drops them after a fork. `memory://` also brings the memory transport, which the
Redis transport Kiln's settings name (CELERY_BROKER_TRANSPORT) would otherwise override: the
messages went to Redis database 0, where no worker takes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kiln.celery import app

_ABSENT = object()
BROKER_KEYS = frozenset({"broker_url", "broker_transport", "broker_write_url"})


def _drop_pools() -> None:
    """Forget the broker connections made so far: the next publish connects to the broker the
    configuration names now."""
    app._pool = None
    amqp = app.__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None


@contextmanager
def celery_conf(**values: Any) -> Iterator[None]:
    """Set these `app.conf` options for the block; afterwards `app.conf` is as it was."""
    url = values.get("broker_url")
    if isinstance(url, str) and url.startswith("memory://"):
        values.setdefault("broker_transport", "memory")
    broker = bool(BROKER_KEYS & values.keys())
    before = {key: app.conf.changes.get(key, _ABSENT) for key in values}
    if broker:
        _drop_pools()
    for key, value in values.items():
        setattr(app.conf, key, value)
    try:
        yield
    finally:
        # Read `changes` again: Celery can replace the mapping while the block runs (a Django
        # settings override does), and the old one would be restored to no effect.
        changes = app.conf.changes
        for key, value in before.items():
            if value is _ABSENT:
                changes.pop(key, None)
            else:
                changes[key] = value
        if broker:
            _drop_pools()
