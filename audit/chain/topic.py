"""The audit topic: one stream of events between the relay and the single writer.

Two implementations behind one interface, chosen by settings: a Redis stream
with a consumer group (REDIS_URL set) and an in-process stream for standalone
mode (no Redis). The relay and the writer run the same code over either.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

import redis
from django.conf import settings


class TopicUnavailable(Exception):
    """The topic cannot be reached now (Redis down); the caller retries later."""


Message = tuple[str, bytes]  # (entry id, payload)


class Topic(Protocol):
    """Publish payloads; a consumer group reads them, and acknowledges after processing."""

    name: str

    def publish(self, payloads: list[bytes]) -> list[str]: ...

    def read(self, consumer: str, count: int, block_ms: int, *, pending: bool) -> list[Message]:
        """New entries, or with `pending` this consumer's delivered-but-unacknowledged ones."""
        ...

    def claim_all(self, consumer: str) -> int:
        """Take over every pending entry of other (dead) consumers; returns how many."""
        ...

    def ack(self, ids: list[str]) -> None: ...

    def backlog(self) -> int:
        """Entries published but not yet acknowledged (pending plus unread)."""
        ...


FIELD = b"e"


class RedisStreamTopic:
    """A Redis stream (XADD) read through a consumer group (XREADGROUP, XACK, XAUTOCLAIM)."""

    def __init__(self, url: str, name: str, group: str) -> None:
        self.name, self.group = name, group
        self._redis_errors = (redis.ConnectionError, redis.TimeoutError)
        self.client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=10)
        self._group_ready = False

    def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            self.client.xgroup_create(self.name, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def _call(self, fn, *args, **kwargs):
        try:
            try:
                return fn(*args, **kwargs)
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                self._group_ready = False  # the stream was lost (Redis restarted): recreate it
                return fn(*args, **kwargs)
        except self._redis_errors as exc:
            self._group_ready = False
            raise TopicUnavailable(f"audit stream {self.name}: {exc.__class__.__name__}") from exc

    def publish(self, payloads: list[bytes]) -> list[str]:
        def go() -> list[str]:
            self._ensure_group()
            pipe = self.client.pipeline(transaction=False)
            for payload in payloads:
                pipe.xadd(self.name, {FIELD: payload})
            return [i.decode() if isinstance(i, bytes) else i for i in pipe.execute()]

        return self._call(go)

    def read(self, consumer: str, count: int, block_ms: int, *, pending: bool) -> list[Message]:
        def go() -> list[Message]:
            self._ensure_group()
            start = "0" if pending else ">"
            block = None if pending or block_ms <= 0 else block_ms
            reply = self.client.xreadgroup(
                self.group, consumer, {self.name: start}, count=count, block=block
            )
            out: list[Message] = []
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                    out.append((eid, fields.get(FIELD, b"") if fields else b""))
            return out

        return self._call(go)

    def claim_all(self, consumer: str) -> int:
        def go() -> int:
            self._ensure_group()
            claimed, cursor = 0, "0-0"
            while True:
                reply = self.client.xautoclaim(
                    self.name, self.group, consumer, min_idle_time=0, start_id=cursor, count=1000
                )
                cursor = reply[0]
                claimed += len(reply[1])
                if cursor in (b"0-0", "0-0"):
                    return claimed

        return self._call(go)

    def ack(self, ids: list[str]) -> None:
        if ids:
            self._call(self.client.xack, self.name, self.group, *ids)

    def backlog(self) -> int:
        def go() -> int:
            self._ensure_group()
            for info in self.client.xinfo_groups(self.name):
                if info["name"] in (self.group, self.group.encode()):
                    lag = info.get("lag")
                    return int(info.get("pending", 0)) + int(lag or 0)
            return 0

        return self._call(go)


class MemoryTopic:
    """An in-process stream with one consumer group, for standalone mode (threads of one process)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._next = 0
        self._entries: OrderedDict[str, bytes] = OrderedDict()  # unread
        self._pending: dict[str, dict[str, bytes]] = {}  # consumer -> delivered, unacked

    def publish(self, payloads: list[bytes]) -> list[str]:
        ids = []
        with self._cond:
            for payload in payloads:
                self._next += 1
                entry_id = f"{self._next}-0"
                self._entries[entry_id] = payload
                ids.append(entry_id)
            self._cond.notify_all()
        return ids

    def read(self, consumer: str, count: int, block_ms: int, *, pending: bool) -> list[Message]:
        with self._cond:
            mine = self._pending.setdefault(consumer, OrderedDict())
            if pending:
                return list(mine.items())[:count]
            if not self._entries and block_ms > 0:
                self._cond.wait(block_ms / 1000)
            out: list[Message] = []
            while self._entries and len(out) < count:
                entry_id, payload = self._entries.popitem(last=False)
                mine[entry_id] = payload
                out.append((entry_id, payload))
            return out

    def claim_all(self, consumer: str) -> int:
        with self._cond:
            mine = self._pending.setdefault(consumer, OrderedDict())
            claimed = 0
            for other, entries in self._pending.items():
                if other != consumer:
                    claimed += len(entries)
                    mine.update(entries)
                    entries.clear()
            return claimed

    def ack(self, ids: list[str]) -> None:
        with self._cond:
            for entries in self._pending.values():
                for entry_id in ids:
                    entries.pop(entry_id, None)

    def backlog(self) -> int:
        with self._cond:
            return len(self._entries) + sum(len(e) for e in self._pending.values())


_memory_topics: dict[str, MemoryTopic] = {}
_redis_topics: dict[tuple[str, str, str], RedisStreamTopic] = {}
_lock = threading.Lock()


def get_topic() -> Topic:
    """The configured audit topic: a Redis stream when REDIS_URL is set, else in-process."""
    name = settings.KILN_AUDIT_STREAM
    with _lock:
        if settings.REDIS_URL:
            key = (settings.REDIS_URL, name, settings.KILN_AUDIT_GROUP)
            if key not in _redis_topics:
                _redis_topics[key] = RedisStreamTopic(*key)
            return _redis_topics[key]
        if name not in _memory_topics:
            _memory_topics[name] = MemoryTopic(name)
        return _memory_topics[name]
