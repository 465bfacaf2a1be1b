"""Concurrent retries with one Idempotency-Key, over the API against the real PostgreSQL: every
retry answers the one environment, none a `409 already exists`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from portal.models import Environment, EnvironmentRequest
from portal.services import requests as submit
from tests.portal.test_api import URL, body

pytestmark = pytest.mark.django_db(transaction=True)


def _post_in_thread(client: Any, key: str, answers: dict[str, Any], name: str) -> threading.Thread:
    """A thread named `name` that POSTs the body with `key` and keeps (status, JSON) in `answers`."""

    def run() -> None:
        try:
            response = client.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY=key)
            answers[name] = (response.status_code, response.json())
        finally:
            connection.close()

    return threading.Thread(target=run, name=name, daemon=True)


def test_a_retry_that_looked_before_the_first_committed_answers_the_first(api, monkeypatch):
    """B looks its key up before A commits and finds nothing, then A commits and B goes on: B
    finds the name taken, by the environment its own key made, and answers that one."""
    alice = api("engineer", sub="alice", team="payments")
    a_committed = threading.Event()
    looked: list[str] = []
    real: Callable[..., Any] = submit._existing_for_key

    def existing_for_key(*args: Any) -> Any:
        found = real(*args)
        if threading.current_thread().name == "B" and not looked:
            looked.append("B")
            assert found is None
            assert a_committed.wait(30)  # A commits between B's look-up and what follows
        return found

    monkeypatch.setattr(submit, "_existing_for_key", existing_for_key)
    answers: dict[str, Any] = {}
    b = _post_in_thread(alice, "race-1", answers, "B")
    b.start()
    a = _post_in_thread(alice, "race-1", answers, "A")
    a.start()
    a.join(60)
    a_committed.set()
    b.join(60)
    assert answers["A"][0] == 201, answers
    assert answers["B"][0] == 200, answers
    assert answers["B"][1]["id"] == answers["A"][1]["id"]
    assert Environment.objects.count() == 1 and EnvironmentRequest.objects.count() == 1


def test_many_concurrent_retries_with_one_key_all_answer_the_one_environment(api):
    alice = api("engineer", sub="alice", team="payments")
    answers: dict[str, Any] = {}
    barrier = threading.Barrier(6)

    def at_once(name: str) -> threading.Thread:
        def run() -> None:
            try:
                barrier.wait(30)
                response = alice_clients[name].post(
                    URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="race-many"
                )
                answers[name] = (response.status_code, response.json())
            finally:
                connection.close()

        return threading.Thread(target=run, name=name, daemon=True)

    alice_clients = {str(i): api("engineer", sub="alice", team="payments") for i in range(6)}
    del alice
    threads = [at_once(name) for name in alice_clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    statuses = sorted(status for status, _ in answers.values())
    assert statuses == [200, 200, 200, 200, 200, 201], answers
    assert len({payload["id"] for _, payload in answers.values()}) == 1
    assert Environment.objects.count() == 1 and EnvironmentRequest.objects.count() == 1
