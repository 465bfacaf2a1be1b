"""A killed worker's tasks go back on the queue within seconds, not after an hour (Redis broker).

Tasks are acknowledged late (CELERY_TASK_ACKS_LATE), so the message of a task whose worker dies
is not lost. On Redis, kombu emulates that: a delivered message waits in the `unacked` hash
until it is acknowledged, and is put back on its queue only once it is older than the
transport's visibility timeout (an hour). A warm shutdown puts back what the worker held; a
SIGKILL of the whole worker (no shutdown at all) does not. The worker fault run of `loadtest`
found 3 messages parked so: the reserved task and the countdown tasks (provisioning polls,
rollout ticks) the killed worker held in memory.

A short visibility timeout is no cure. It redelivers any message older than itself, whether
its worker is dead or not: a countdown longer than it (a rollout tick waits up to 3,600 s) or a
task that runs longer (the chaos controller runs for its whole experiment) would be delivered
again while its worker still holds it, once more every timeout.

So each worker says which messages it holds and that it is alive, and the others act on it:

- an incarnation is one broker connection of one run of a worker process (hostname, pid and a
  random part, so a worker restarted under the same name, or reconnected, is another one, see
  below); it keeps `kiln:celery:alive:<incarnation>`
  with a time to live of KILN_CELERY_HOLDER_TTL seconds, refreshed every third of it;
- on receiving a task message (before it runs, or waits for its countdown) the worker writes
  `delivery tag -> incarnation` in the `kiln:celery:holders` hash;
- every KILN_CELERY_RECOVERY_SECONDS each worker sweeps: a tag no longer unacknowledged is
  forgotten; a tag whose holder's key has been gone for a whole time to live (as this sweeper
  saw it: a Redis outage longer than the TTL lets keys lapse that their live workers write
  again within a third of it) goes back on its queue through kombu's own `restore_by_tag`, the
  transaction kombu runs at its visibility timeout. Two sweepers restore a tag once: the
  transaction watches the unacked hash and finds the tag gone the second time.

A live worker drops messages too, when it loses its broker connection (a Redis restart): the
consumer forgets every message the old connection delivered but the tasks still running
(celery's `Consumer.on_close`: "they can't be acked anyway"), the countdown messages and the
reserved ones, and counts on the broker to deliver them again. On Redis nothing does: kombu's
channel close tries to put them back through the Redis that just went away (or, the transport
torn down already, not at all: kiln/broker.py, which also keeps that from killing the worker),
so they stay in the `unacked` hash, recorded against a heartbeat that lived on: the Redis fault
run of `loadtest` found a rollout tick parked so. So an incarnation is one broker
connection of a worker process, not the process: on each reconnection (the consumer step
`NewConnection`) the worker takes a new incarnation, re-records under it the messages of the
tasks still running (they are acknowledged when they finish) and ends the old heartbeat; the
old incarnation's other messages are then a gone holder's, and a sweep puts them back a TTL
later, kombu's own restore skipping any the channel close did put back. The TTL is also the
grace for a task handed to the pool just before the loss: it runs and is acknowledged first.

A message no worker claimed (its worker died between delivery and the record: the worker
fault test caught a relay task parked so) is put back once a sweeper has seen it unacknowledged
and unclaimed for a whole TTL; a worker records its hold within milliseconds of the delivery, so
a TTL without one means nobody will. A restored task runs again: every task is idempotent (its
service checks the current state first), which the fault runs reconcile.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field

import redis
from celery import Celery, bootsteps
from celery.signals import task_received, worker_ready, worker_shutdown
from celery.worker import state as worker_state
from kombu.exceptions import OperationalError

log = logging.getLogger("kiln.celery.recovery")

HOLDERS_KEY = "kiln:celery:holders"
ALIVE_PREFIX = "kiln:celery:alive:"
# Forget tag ARGV[i] only while ARGV[i+1] still holds it: a message put back keeps its delivery
# tag, and the worker it reaches next may have recorded itself under it in the meantime.
FORGET = """
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return n
"""
# Move tag ARGV[i] from holder ARGV[1] to ARGV[2], only while ARGV[1] still holds it (it may
# have been put back and recorded by the worker it reached since).
MOVE = """
local n = 0
for i = 3, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[1] then
    n = n + 1
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[2])
  end
end
return n
"""


def new_incarnation() -> str:
    """A name for one broker connection of this worker process: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass
class Recovery:
    """One worker process's part: its heartbeat, its holder records and its sweeps."""

    app: Celery
    client: redis.Redis
    ttl: float
    sweep_seconds: float
    incarnation: str = field(default_factory=new_incarnation)
    missing_since: dict[str, float] = field(default_factory=dict)
    unclaimed_since: dict[str, float] = field(default_factory=dict)  # delivery tag -> first seen
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    # The heartbeat thread must not renew an incarnation `reincarnate` has just ended.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def beat(self) -> None:
        """Say this incarnation is alive for another TTL."""
        with self._lock:
            self.client.set(ALIVE_PREFIX + self.incarnation, "1", px=int(self.ttl * 1000))

    def hold(self, delivery_tag: str) -> None:
        """Record that this incarnation holds the message `delivery_tag` (unacknowledged)."""
        self.client.hset(HOLDERS_KEY, delivery_tag, self.incarnation)

    def reincarnate(self, kept: list[str]) -> str:
        """A new broker connection: become a new incarnation, which holds the messages `kept`
        (the tasks still running), and end the old one's heartbeat, so that what else it held
        goes back on its queue a TTL later. Returns the old incarnation.

        Should Redis fail here, the old heartbeat is not renewed any more and lapses by itself.
        """
        with self._lock:
            old, self.incarnation = self.incarnation, new_incarnation()
            self.client.set(ALIVE_PREFIX + self.incarnation, "1", px=int(self.ttl * 1000))
        if kept:
            self.client.eval(MOVE, 1, HOLDERS_KEY, old, self.incarnation, *kept)
        self.client.delete(ALIVE_PREFIX + old)
        log.warning(
            "task recovery: a new broker connection; worker %s is now %s (%d running task(s) "
            "kept), the messages it held before go back on their queues", old, self.incarnation,
            len(kept),
        )  # fmt: skip
        return old

    def sweep(self, *, now: float | None = None) -> list[str]:
        """Forget acknowledged tags; put back those of holders gone a whole TTL and those no
        worker claimed for a whole TTL; returns them."""
        now = time.monotonic() if now is None else now
        holders = {
            tag.decode(): holder.decode()
            for tag, holder in self.client.hgetall(HOLDERS_KEY).items()
        }
        unacked_key = self._unacked_key()
        unclaimed = self._unclaimed(now, holders, unacked_key)
        if unclaimed:
            self._restore(unclaimed)
            log.warning(
                "put back %d task message(s) no worker claimed for %.0f s", len(unclaimed), self.ttl
            )
        if not holders:
            self.missing_since.clear()
            return unclaimed
        tags = list(holders)
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            pipe.hexists(unacked_key, tag)
        unacked = dict(zip(tags, pipe.execute(), strict=True))
        self._forget([tag for tag in tags if not unacked[tag]], holders)
        live_holders = sorted({holders[t] for t in tags if unacked[t]})
        pipe = self.client.pipeline(transaction=False)
        for holder in live_holders:
            pipe.exists(ALIVE_PREFIX + holder)
        alive = dict(zip(live_holders, pipe.execute(), strict=True))
        gone = set()
        for holder, is_alive in alive.items():
            if is_alive:
                self.missing_since.pop(holder, None)
                continue
            first = self.missing_since.setdefault(holder, now)
            if now - first >= self.ttl:
                gone.add(holder)
        for holder in set(self.missing_since) - set(alive):
            del self.missing_since[holder]
        restored = [t for t in tags if unacked[t] and holders[t] in gone]
        if restored:
            self._forget(restored, holders)  # first: the next worker records the same tag
            self._restore(restored)
            log.warning(
                "put back %d task message(s) held by worker(s) gone for %.0f s: %s",
                len(restored), self.ttl, ", ".join(sorted(gone)),
            )  # fmt: skip
        return unclaimed + restored

    def _unclaimed(self, now: float, holders: dict[str, str], unacked_key: str) -> list[str]:
        """Unacknowledged tags without a holder record, each seen so for a whole TTL."""
        tags = {tag.decode() for tag in self.client.hkeys(unacked_key)} - holders.keys()
        for tag in set(self.unclaimed_since) - tags:  # claimed, acknowledged or put back
            del self.unclaimed_since[tag]
        for tag in tags:
            self.unclaimed_since.setdefault(tag, now)
        due = sorted(t for t in tags if now - self.unclaimed_since[t] >= self.ttl)
        for tag in due:
            del self.unclaimed_since[tag]
        return due

    def _restore(self, tags: list[str]) -> None:
        """Put the messages back on their queues (kombu's restore skips a tag already gone)."""
        with self.app.connection_for_write() as conn:
            qos = conn.default_channel.qos
            for tag in tags:
                qos.restore_by_tag(tag)

    def _forget(self, tags: list[str], holders: dict[str, str]) -> None:
        if tags:
            pairs = [v for tag in tags for v in (tag, holders[tag])]
            self.client.eval(FORGET, 1, HOLDERS_KEY, *pairs)

    def _unacked_key(self) -> str:
        options = self.app.conf.broker_transport_options or {}
        return options.get("global_keyprefix", "") + options.get("unacked_key", "unacked")

    def start(self) -> None:
        """Heartbeat and sweep in a daemon thread until `stop`."""
        self._thread = threading.Thread(target=self._run, name="kiln-task-recovery", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and give up the heartbeat (a warm shutdown puts back what it held)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            with self._lock:
                self.client.delete(ALIVE_PREFIX + self.incarnation)
        except redis.RedisError:
            pass

    def _run(self) -> None:
        next_sweep = 0.0
        while not self._stop.is_set():
            try:
                self.beat()
                if time.monotonic() >= next_sweep:
                    self.sweep()
                    next_sweep = time.monotonic() + self.sweep_seconds
            except (redis.RedisError, OperationalError, OSError) as exc:  # broker down: next beat
                log.warning("task recovery: %s", exc)
            self._stop.wait(min(self.ttl / 3, self.sweep_seconds))


class _Worker:
    """This process's Recovery, once its worker is ready (None in any other process)."""

    current: Recovery | None = None


def uses_redis(app: Celery) -> bool:
    """Whether the broker is Redis (the only transport here with kombu's visibility timeout)."""
    return str(app.conf.broker_url or "").startswith(("redis://", "rediss://"))


def recovery_for(app: Celery) -> Recovery:
    """A Recovery for this process with the configured TTL and sweep period (the settings
    CELERY_KILN_HOLDER_TTL and CELERY_KILN_RECOVERY_SECONDS, from KILN_CELERY_HOLDER_TTL and
    KILN_CELERY_RECOVERY_SECONDS)."""
    return Recovery(
        app=app,
        client=redis.Redis.from_url(
            app.conf.broker_url, socket_timeout=5, socket_connect_timeout=2
        ),
        ttl=float(app.conf.get("kiln_holder_ttl", 10.0)),
        sweep_seconds=float(app.conf.get("kiln_recovery_seconds", 2.0)),
    )


def _on_task_received(sender=None, request=None, **_: object) -> None:
    recovery = _Worker.current
    tag = getattr(getattr(request, "message", None), "delivery_tag", None)
    if recovery is None or tag is None:
        return
    try:
        recovery.hold(str(tag))
    except redis.RedisError as exc:  # unrecorded: the visibility timeout still brings it back
        log.warning("task recovery: could not record %s: %s", tag, exc)


class NewConnection(bootsteps.StartStopStep):
    """Consumer step: started on each broker connection; from the second on (the consumer
    reconnected after losing its connection, having dropped the messages it held but the running
    tasks'), this process's Recovery takes a new incarnation."""

    requires = ("celery.worker.consumer.connection:Connection",)

    def __init__(self, parent, **kwargs) -> None:
        super().__init__(parent, **kwargs)
        self.connections = 0

    def start(self, parent) -> None:
        self.connections += 1
        recovery = _Worker.current
        if recovery is None or self.connections == 1:
            return
        kept = [
            str(tag)
            for request in tuple(worker_state.active_requests)
            if (tag := getattr(getattr(request, "message", None), "delivery_tag", None))
        ]
        try:
            recovery.reincarnate(kept)
        except redis.RedisError as exc:  # the old heartbeat lapses by itself within a TTL
            log.warning("task recovery: could not take a new incarnation: %s", exc)


def _on_worker_shutdown(**_: object) -> None:
    if _Worker.current is not None:
        _Worker.current.stop()
        _Worker.current = None


def install(app: Celery) -> None:
    """Connect the worker signals for `app` (kiln.celery does, once)."""

    def on_worker_ready(**_: object) -> None:
        if not uses_redis(app) or _Worker.current is not None:
            return
        recovery = recovery_for(app)
        recovery.beat()
        recovery.start()
        _Worker.current = recovery

    app.steps["consumer"].add(NewConnection)
    worker_ready.connect(on_worker_ready, weak=False)
    task_received.connect(_on_task_received, weak=False)
    worker_shutdown.connect(_on_worker_shutdown, weak=False)
