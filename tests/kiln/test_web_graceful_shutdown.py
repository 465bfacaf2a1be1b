"""The web as `make dev`, Kubernetes and the load test run it stops within its graceful bound
of a SIGTERM, even with a request still waiting: a restart does not wait for the SIGKILL."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time

import pytest

from kiln.identity.models import Team
from tests.audit.conftest import subprocess_env
from tests.kiln.standalone_process import free_port
from tests.support.shape import WEB_GRACEFUL_SHUTDOWN_SECONDS, Shape

BODY = {"team": "payments", "name": "held", "env_class": "dev", "ttl_hours": 24, "cpu": 1,
        "memory_gib": 1}  # fmt: skip


def _call(port: int, method: str, path: str, token: str, body=None, headers=None):
    wire = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    wire.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                          **(headers or {})})  # fmt: skip
    answer = wire.getresponse()
    return answer.status, answer.getheader("ETag"), answer.read()


@pytest.mark.django_db(transaction=True)
def test_a_sigterm_stops_the_web_within_its_bound_though_a_request_still_waits(
    settings, make_token, tmp_path
):
    Team.objects.create(slug="payments", name="Payments")
    alice = make_token(sub="alice", roles=["engineer"], team="payments")
    jwt = ("KILN_JWT_JWKS", "KILN_JWT_ISSUER", "KILN_JWT_AUDIENCE")
    environment = subprocess_env(settings, **{name: getattr(settings, name) for name in jwt})
    shape = Shape(
        port=free_port(), environment=environment, workdir=tmp_path, names=("web",),
        web_processes=1,
    )  # fmt: skip
    waited: dict[str, object] = {}
    try:
        shape.start_all(timeout=90)
        status, _, created = _call(shape.port, "POST", "/api/v1/environments/", alice, BODY)
        assert status == 201, created
        path = f"/api/v1/environments/{json.loads(created)['id']}/"
        status, etag, _ = _call(shape.port, "GET", path, alice)
        assert status == 200 and etag

        def wait_for_a_change() -> None:  # nothing changes it: it would wait 30 s
            started = time.monotonic()
            try:
                waited["status"] = _call(
                    shape.port, "GET", path, alice,
                    headers={"If-None-Match": etag, "Prefer": "wait=30"},
                )[0]  # fmt: skip
            except (OSError, http.client.HTTPException) as exc:
                waited["status"] = type(exc).__name__
            waited["seconds"] = time.monotonic() - started

        waiter = threading.Thread(target=wait_for_a_change)
        waiter.start()
        time.sleep(2.0)
        assert "status" not in waited  # still waiting when the web is told to stop
        stopping = time.monotonic()
        shape.kill("web", signal.SIGTERM)  # SIGKILLs only after 30 s
        stopped_after = time.monotonic() - stopping
        waiter.join(timeout=60)
    finally:
        shape.stop_all()
    assert stopped_after <= WEB_GRACEFUL_SHUTDOWN_SECONDS + 5, stopped_after
    assert waited["seconds"] < 30 - 5, waited  # cut, not answered after its whole wait
