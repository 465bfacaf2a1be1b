"""Relays publish one at a time (audit/services/relaying.py), so the audit stream keeps the order
in which events committed. Two relays at once each published the rows the other had not locked,
in whichever order their writes landed: the load test's web-restart run chained an
environment's READY before the PROVISIONING that came first."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection

from audit import record
from audit.models import OutboxEvent
from audit.services import relaying


class SlowFirstWrite:
    """A topic that records the actions it is given. Its first write is slow: it waits (up to a
    second) for another relay to write, as a slow stream write would let one."""

    def __init__(self) -> None:
        self.actions: list[str] = []
        self.calls = 0
        self.first_writing = threading.Event()
        self.other_wrote = threading.Event()
        self.lock = threading.Lock()

    def publish(self, payloads: list[bytes]) -> list[str]:
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            self.first_writing.set()
            self.other_wrote.wait(timeout=1.0)
        with self.lock:
            self.actions += [json.loads(p)["action"] for p in payloads]
        if not first:
            self.other_wrote.set()
        return [str(i) for i in range(len(payloads))]


@pytest.mark.django_db(transaction=True)
def test_a_relay_started_while_another_publishes_waits_and_the_order_holds(monkeypatch):
    topic = SlowFirstWrite()
    monkeypatch.setattr(relaying, "get_topic", lambda: topic)
    failures: list[BaseException] = []

    def relay() -> None:
        try:
            relaying.relay_publish()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            connection.close()

    try:
        record("alice", "portal.environment.provisioning_started", "env:1")
        first = threading.Thread(target=relay)
        first.start()
        assert topic.first_writing.wait(timeout=10)  # it holds the first event's row
        # The next event of the same environment commits while the first relay still writes.
        record("alice", "portal.environment.readied", "env:1")
        second = threading.Thread(target=relay)
        second.start()
        first.join(timeout=30)
        second.join(timeout=30)
        assert not failures, failures
        assert topic.actions == [
            "portal.environment.provisioning_started",
            "portal.environment.readied",
        ]
        assert not OutboxEvent.objects.filter(published_at__isnull=True).exists()
    finally:
        OutboxEvent.objects.all().delete()
