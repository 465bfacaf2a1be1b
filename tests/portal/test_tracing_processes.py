"""One trace per request in the production shape: a staging request submitted over HTTP to
uvicorn, approved by another person over HTTP and provisioned by a prefork Celery worker is one
trace. Every audit event it caused carries the trace the client sent, and the spans both
processes export to an OTLP/HTTP receiver on loopback arrive with their parents."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from audit.models import OutboxEvent
from kiln.identity.models import Team
from tests.audit.conftest import subprocess_env
from tests.kiln.standalone_process import free_port
from tests.portal.otlp_receiver import Receiver
from tests.support.shape import Shape

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


def _call(base: str, method: str, path: str, token: str, body: dict | None = None, **headers):
    request = urllib.request.Request(  # noqa: S310 - loopback
        base + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return json.loads(response.read())


@pytest.mark.django_db(transaction=True)
def test_one_request_is_one_trace_across_web_approval_and_worker(settings, make_token, tmp_path):
    Team.objects.create(slug="payments", name="Payments")
    alice = make_token(sub="alice", roles=["engineer"], team="payments")
    carol = make_token(sub="carol", roles=["approver"], team="payments")
    with Receiver() as receiver:
        environment = subprocess_env(
            settings,
            KILN_JWT_JWKS=settings.KILN_JWT_JWKS,
            KILN_JWT_ISSUER=settings.KILN_JWT_ISSUER,
            KILN_JWT_AUDIENCE=settings.KILN_JWT_AUDIENCE,
            KILN_DELIVERY_BACKEND="simulated",
            KILN_SIM_DELAY_PROFILE="zero",
            KILN_TRACING="1",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_BSP_SCHEDULE_DELAY="100",
        )
        shape = Shape(
            port=free_port(),
            environment=environment,
            workdir=tmp_path,
            names=("web", "worker"),
            worker_concurrency=1,
        )
        try:
            shape.start_all(timeout=90)
            base = shape.base_url
            created = _call(
                base, "POST", "/api/v1/environments/", alice,
                {"team": "payments", "name": "traced", "env_class": "staging",
                 "ttl_hours": 24, "cpu": 1, "memory_gib": 1},
                traceparent=f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
            )  # fmt: skip
            env_id = created["id"]
            _call(base, "POST", f"/api/v1/environments/{env_id}/approve/", carol, {})
            deadline = time.monotonic() + 60
            while _call(base, "GET", f"/api/v1/environments/{env_id}/", alice)["status"] != "READY":
                assert time.monotonic() < deadline, "not READY within 60 s"
                time.sleep(0.2)
            # Wait for the worker's spans (batched every 100 ms).
            deadline = time.monotonic() + 30
            while not {"kiln-web", "kiln-worker"} <= {
                s.service for s in receiver.of_trace(CLIENT_TRACE)
            } or "portal.environment.provision" not in {
                s.name for s in receiver.of_trace(CLIENT_TRACE)
            }:
                assert time.monotonic() < deadline, {(s.service, s.name) for s in receiver.spans}
                time.sleep(0.2)
            time.sleep(0.5)
        finally:
            shape.stop_all()
        spans = receiver.of_trace(CLIENT_TRACE)

    events = OutboxEvent.objects.filter(target=f"portal.environment:{env_id}")
    actions = set(events.values_list("action", flat=True))
    assert {
        "portal.environment.submitted",
        "portal.environment.approved",
        "portal.environment.provisioning_started",
        "portal.environment.readied",
    } <= actions
    assert set(events.values_list("trace_id", flat=True)) == {CLIENT_TRACE}
    names = {(s.service, s.name) for s in spans}
    assert ("kiln-web", "POST api/v1/environments/") in names, names
    assert ("kiln-web", "portal.environment.approve") in names, names
    assert ("kiln-worker", "portal.environment.provision") in names, names
    # Every span's parent is the client's span or a span that arrived: no orphan, no second root.
    known = {s.span_id for s in spans} | {CLIENT_SPAN}
    orphans = [s for s in spans if s.parent_span_id not in known]
    assert not orphans, orphans
    # The worker's spans hang below the web's, through the task message's headers.
    by_id = {s.span_id: s for s in spans}
    provision = next(s for s in spans if s.name == "portal.environment.provision")
    chain = []
    span = provision
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        chain.append(span.service)
    assert "kiln-web" in chain and span.parent_span_id == CLIENT_SPAN
