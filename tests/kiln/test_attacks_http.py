"""Cross-team attacks over real HTTP against a standalone Kiln: an engineer of `search` goes after `payments`.

One standalone process serves the whole module. Each attack must be a 4xx with a
reason in Kiln's error shape and change nothing: the rows an admin lists and the
audit chain are compared before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.kiln import standalone_process

FOREIGN_FQDN = "checkout.payments-prod.svc.cluster.local"


@pytest.fixture(scope="module")
def kiln(tmp_path_factory):
    var = tmp_path_factory.mktemp("attacks") / "var"
    server = standalone_process.start(var, timeout=60)
    try:
        server.tokens["search-engineer"] = _token(var, "bob", "engineer", "search")
        yield server
    finally:
        standalone_process.stop(server, timeout=15)


def _token(var, sub: str, role: str, team: str) -> str:
    """A token of the standalone's own signing key, minted the way an operator would."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")
        and not k.startswith(("KILN_", "DJANGO_", "OTEL_"))
    }
    env["KILN_VAR_DIR"] = str(var)
    out = subprocess.run(
        [sys.executable, "manage.py", "kiln_token", "--sub", sub, "--roles", role, "--team", team],
        cwd=standalone_process.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def _call(kiln, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(kiln.base_url + path, data=data, method=method)  # noqa: S310
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310 - our server
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _items(body: Any) -> list[dict]:
    return body["results"] if isinstance(body, dict) and "results" in body else body


def _state(kiln) -> dict[str, Any]:
    """What an admin sees of every canary service, rollout and chaos experiment."""
    admin = kiln.tokens["platform-admin"]
    state = {}
    for name, path in (
        ("services", "/api/v1/canary/services/"),
        ("rollouts", "/api/v1/rollouts/?limit=500"),
        ("experiments", "/api/v1/chaos/experiments/?limit=500"),
    ):
        status, body = _call(kiln, "GET", path, admin)
        assert status == 200, body
        state[name] = sorted(str(i["id"]) for i in _items(body))
    return state


def _bobs_canary_events(kiln) -> list[str]:
    status, body = _call(
        kiln,
        "GET",
        "/api/v1/audit/events/?actor=bob&action=canary.&limit=500",
        kiln.tokens["auditor"],
    )
    assert status == 200, body
    return [e["action"] for e in body["results"]]


def _refused(status: int, body: Any, *allowed: int) -> None:
    assert status in allowed, (status, body)
    assert isinstance(body, dict) and body.get("code") and body.get("message"), body
    assert set(body) == {"code", "message", "extra"}, body


SERVICE_ATTACKS = {
    # The attack: payments' namespace, payments' checkout host.
    "foreign-namespace": ({"namespace": "payments-prod", "host": FOREIGN_FQDN}, 403),
    "foreign-environment-namespace": ({"namespace": "payments-checkout-preview"}, 403),
    "foreign-host-fqdn": ({"namespace": "search-prod", "host": FOREIGN_FQDN}, 403),
    "foreign-host-short": ({"namespace": "search-prod", "host": "checkout.payments-prod"}, 403),
    "foreign-host-shouting": (
        {"namespace": "search-prod", "host": FOREIGN_FQDN.upper() + "."},
        403,
    ),
    "wildcard-host": (
        {"namespace": "search-prod", "host": "*.payments-prod.svc.cluster.local"},
        400,
    ),
    "ip-host": ({"namespace": "search-prod", "host": "10.96.0.10"}, 400),
    "other-domain": (
        {"namespace": "search-prod", "host": "checkout.search-prod.svc.evil.com"},
        400,
    ),
    "unicode-host": ({"namespace": "search-prod", "host": "chec\u212aout.search-prod"}, 400),
    "format-attribute": (
        {"namespace": "search-prod", "queries": {"requests": "{service.__class__}"}},
        400,
    ),
    "format-spec": (
        {"namespace": "search-prod", "queries": {"errors": "up[{window:>2000000000}]"}},
        400,
    ),
    "template-attribute": (
        {"namespace": "search-prod", "queries": {"requests": 'up{a="{{service.__class__}}"}'}},
        400,
    ),
    "metrics-loopback": (
        {
            "namespace": "search-prod",
            "metrics_source": "prometheus",
            "prometheus_url": "http://127.0.0.1:9090",
        },
        400,
    ),
    "metrics-cloud-metadata": (
        {
            "namespace": "search-prod",
            "metrics_source": "prometheus",
            "prometheus_url": "http://169.254.169.254/latest/meta-data/",
        },
        400,
    ),
    "metrics-url-on-simulated": (
        {"namespace": "search-prod", "prometheus_url": "http://169.254.169.254/"},
        400,
    ),
}


def test_search_cannot_reach_payments_traffic_and_every_refusal_changes_nothing(kiln):
    bob = kiln.tokens["search-engineer"]
    before = _state(kiln)
    assert _bobs_canary_events(kiln) == []

    for name, (fields, expected) in SERVICE_ATTACKS.items():
        body = {"team": "search", "name": f"evil-{len(name)}", **fields}
        status, answer = _call(kiln, "POST", "/api/v1/canary/services/", bob, body)
        _refused(status, answer, expected)
        if "queries" in fields:
            assert next(iter(fields["queries"])) in answer["message"], (name, answer)

    # A rollout of payments' own service: invisible to search, so the same answer as a missing one.
    status, services = _call(kiln, "GET", "/api/v1/canary/services/", kiln.tokens["platform-admin"])
    checkout = next(s for s in _items(services) if s["namespace"] == "payments-prod")
    assert checkout["host"] == FOREIGN_FQDN
    status, answer = _call(
        kiln,
        "POST",
        "/api/v1/rollouts/",
        bob,
        {"service": checkout["id"], "baseline_version": "v1", "canary_version": "v3"},
    )
    _refused(status, answer, 403, 404)

    # Chaos: an abort of payments' checkout from search's own namespace, and from payments'.
    experiment = {
        "name": "evil abort",
        "selector": {"app": "search-api"},
        "fault": "http-abort",
        "abort_http_status": 503,
        "percent": 100.0,
        "duration_seconds": 60,
        "max_duration_seconds": 120,
        "max_pods": 1,
    }
    for namespace, host in (
        ("search-prod", FOREIGN_FQDN),
        ("search-prod", "checkout.payments-prod"),
        ("search-prod", FOREIGN_FQDN.upper() + "."),
        ("payments-prod", "checkout"),
        ("search-prod", "*"),
    ):
        status, answer = _call(
            kiln,
            "POST",
            "/api/v1/chaos/experiments/",
            bob,
            {**experiment, "namespace": namespace, "service": host},
        )
        _refused(status, answer, 400, 403)

    assert _state(kiln) == before

    # A legitimate write by bob, to know the audit chain has caught up with everything before it.
    status, marker = _call(
        kiln,
        "POST",
        "/api/v1/canary/services/",
        bob,
        {"team": "search", "name": "marker", "namespace": "search-prod", "host": "marker."},
    )
    assert status == 201 and marker["host"] == "marker.search-prod.svc.cluster.local", marker
    deadline = time.monotonic() + 15
    while _bobs_canary_events(kiln) == [] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _bobs_canary_events(kiln) == ["canary.service.created"]


def test_every_registered_service_routes_a_host_of_its_own_namespace(kiln):
    """What the API shows of each service (the demo's and the marker): a fully qualified host in it."""
    status, services = _call(kiln, "GET", "/api/v1/canary/services/", kiln.tokens["platform-admin"])
    assert status == 200 and len(_items(services)) >= 2
    for service in _items(services):
        namespace = service["namespace"]
        assert service["host"].split(".")[1:] == [namespace, "svc", "cluster", "local"], service
