"""Change notices: a reader waits for a resource to change instead of polling it.

A writer calls `notify_after_commit(key)` in the transaction that changes the resource;
once that transaction commits, the key is published: on the Redis channel
`kiln:changed:<key>` when REDIS_URL is set (the web process, the workers and every other
process see it), and to this process's own waiters in any case (standalone, where the web
and the worker share one process and there may be no Redis). A rolled-back change is never
announced.

A reader calls `wait_for_change(key, seconds=..., changed=...)`. It returns True as soon as
`changed()` says the resource is no longer what the reader has; a notice for the key makes
it ask at once, and it also asks every RECHECK_SECONDS, so a lost notice (Redis restarted,
the writer died between its commit and the publish) delays the answer by at most that much
and never makes it wrong. Each process keeps one subscriber thread (one Redis connection,
one pattern subscription) that wakes the local waiters of a key; it starts with the first
waiter and reconnects on its own. A reader watching many resources at once gives one
event to `listen(key, event)` for each of them, and re-checks on its own as well.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

PREFIX = "kiln:changed:"
RECHECK_SECONDS = 1.0  # the longest a lost notice can delay a waiter
RECONNECT_SECONDS = 1.0


class _Hub:
    """This process's waiters, keyed by resource, and the thread that wakes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[threading.Event]] = {}
        self._listener: threading.Thread | None = None

    def register(self, key: str, event: threading.Event | None = None) -> threading.Event:
        event = event or threading.Event()
        with self._lock:
            self._waiters.setdefault(key, set()).add(event)
            if _redis_url() and (self._listener is None or not self._listener.is_alive()):
                self._listener = threading.Thread(
                    target=self._listen, name="kiln-change-notices", daemon=True
                )
                self._listener.start()
        return event

    def unregister(self, key: str, event: threading.Event) -> None:
        with self._lock:
            waiting = self._waiters.get(key)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[key]

    def wake(self, key: str) -> None:
        with self._lock:
            for event in self._waiters.get(key, ()):
                event.set()

    def _listen(self) -> None:
        while True:
            try:
                client = redis.Redis.from_url(_redis_url(), socket_connect_timeout=2)
                subscription = client.pubsub(ignore_subscribe_messages=True)
                subscription.psubscribe(f"{PREFIX}*")
                for message in subscription.listen():
                    channel = message.get("channel") or b""
                    self.wake(channel.decode()[len(PREFIX) :])
            except (redis.RedisError, OSError) as exc:
                # Waiters still re-check every RECHECK_SECONDS meanwhile.
                log.warning("change notices: %s; reconnecting", exc)
            time.sleep(RECONNECT_SECONDS)


_hub = _Hub()
_publisher: redis.Redis | None = None


def _redis_url() -> str:
    return getattr(settings, "REDIS_URL", "") or ""


def publish(key: str) -> None:
    """Announce now that `key` changed (a Redis outage is logged: waiters re-check anyway)."""
    global _publisher
    _hub.wake(key)
    url = _redis_url()
    if not url:
        return
    try:
        if _publisher is None:
            _publisher = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
        _publisher.publish(f"{PREFIX}{key}", b"")
    except (redis.RedisError, OSError) as exc:
        log.warning("change notice for %s not published: %s", key, exc)


def notify_after_commit(key: str) -> None:
    """Announce that `key` changed once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: publish(key))


def listen(key: str, event: threading.Event) -> None:
    """Set `event` whenever `key` is announced, until `unlisten(key, event)`: one event may
    listen to many keys, for a reader that waits on a set of resources at once."""
    _hub.register(key, event)


def unlisten(key: str, event: threading.Event) -> None:
    """Stop setting `event` for `key`."""
    _hub.unregister(key, event)


def wait_for_change(key: str, *, seconds: float, changed: Callable[[], bool]) -> bool:
    """Wait up to `seconds` until `changed()` is true; True if it became true in time.

    `changed` is asked first (the reader may already be behind), then after every notice
    for `key` and at least every RECHECK_SECONDS. The waiter is registered before the first
    question, so a change committed between the question and the wait still wakes it.
    """
    event = _hub.register(key)
    try:
        deadline = time.monotonic() + seconds
        while True:
            if changed():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            event.wait(min(left, RECHECK_SECONDS))
            event.clear()
    finally:
        _hub.unregister(key, event)
