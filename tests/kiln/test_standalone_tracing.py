"""One trace per request in standalone too: over HTTP to the real `manage.py standalone`, a
staging request, its approval by another person and its in-process provisioning are one trace,
in the audit chain and in the spans exported to an OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import json
import time
import urllib.request

from tests.kiln import standalone_process
from tests.portal.otlp_receiver import Receiver

CLIENT_TRACE = "5b8efff798038103d269b633813fc60c"
CLIENT_SPAN = "eee19b7ec3c1b174"


def _call(server, method: str, path: str, role: str, body: dict | None = None, **headers):
    request = urllib.request.Request(  # noqa: S310 - loopback
        server.base_url + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={
            "Authorization": f"Bearer {server.tokens[role]}",
            "Content-Type": "application/json",
            **headers,
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return json.loads(response.read())


def test_standalone_request_approval_and_provisioning_are_one_trace(tmp_path):
    with Receiver() as receiver:
        server = standalone_process.start(
            tmp_path / "var",
            timeout=90,
            environment={
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            },
        )
        try:
            env = _call(
                server, "POST", "/api/v1/environments/", "engineer",
                {"team": "payments", "name": "traced", "env_class": "staging",
                 "ttl_hours": 24, "cpu": 1, "memory_gib": 1},
                traceparent=f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
            )  # fmt: skip
            _call(server, "POST", f"/api/v1/environments/{env['id']}/approve/", "approver", {})
            target = f"portal.environment:{env['id']}"
            deadline = time.monotonic() + 60
            while True:
                events = _call(
                    server, "GET", f"/api/v1/audit/events/?target={target}&limit=100", "auditor"
                )["results"]
                if "portal.environment.readied" in {e["action"] for e in events}:
                    break
                assert time.monotonic() < deadline, [e["action"] for e in events]
                time.sleep(0.3)
            deadline = time.monotonic() + 20
            while "portal.environment.provision" not in {
                s.name for s in receiver.of_trace(CLIENT_TRACE)
            }:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        finally:
            standalone_process.stop(server, timeout=20)
        spans = receiver.of_trace(CLIENT_TRACE)
    assert {
        "portal.environment.submitted",
        "portal.environment.queued_for_approval",
        "portal.environment.approved",
        "portal.environment.readied",
    } <= {e["action"] for e in events}
    assert {e["trace_id"] for e in events} == {CLIENT_TRACE}, [
        (e["action"], e["trace_id"]) for e in events
    ]
    known = {s.span_id for s in spans} | {CLIENT_SPAN}
    assert not [s for s in spans if s.parent_span_id not in known]
    assert {"POST api/v1/environments/", "portal.environment.approve"} <= {s.name for s in spans}
