"""Services started together stop together, also when one of them fails to start."""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError

from kiln.standalone import Service, services_together


def _service(name: str, events: list[str], fails: bool = False) -> Service:
    def start() -> None:
        if fails:
            raise CommandError(f"{name} did not start")
        events.append(f"start {name}")

    return Service(name, start, lambda: events.append(f"stop {name}"))


def test_they_start_in_order_and_stop_in_reverse():
    events: list[str] = []
    both = services_together(_service("writer", events), _service("worker", events))
    both.start()
    both.stop()
    assert events == ["start writer", "start worker", "stop worker", "stop writer"]


def test_one_that_fails_to_start_stops_those_already_started():
    events: list[str] = []
    together = services_together(
        _service("writer", events), _service("beat", events), _service("worker", events, fails=True)
    )
    with pytest.raises(CommandError, match="worker did not start"):
        together.start()
    assert events == ["start writer", "start beat", "stop beat", "stop writer"]
