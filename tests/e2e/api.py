"""Calls to the standalone server's REST API from browser tests (to set up what a page shows)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from tests.kiln.standalone_process import Standalone


def call(kiln: Standalone, method: str, path: str, role: str, body: Any = None) -> tuple[int, Any]:
    """One API call as the demo token of `role`; returns (status, decoded JSON or None)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(kiln.base_url + path, data=data, method=method)  # noqa: S310
    request.add_header("Authorization", f"Bearer {kiln.tokens[role]}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=15) as response:  # noqa: S310 - our URL
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


def post(kiln: Standalone, path: str, body: Any, role: str = "platform-admin") -> Any:
    """POST `body` as `role`; the decoded answer, which must be a success."""
    status, answer = call(kiln, "POST", path, role, body)
    assert 200 <= status < 300, (path, status, answer)
    return answer


def wait_for(predicate: Callable[[], Any], *, timeout: float = 30.0, what: str = "") -> Any:
    """Poll `predicate` until it returns something truthy; fail with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def environment(kiln: Standalone, name: str, *, role: str = "engineer", **over: Any) -> dict:
    """Submit an environment request for team payments (alice's token); returns its JSON."""
    body = {
        "team": "payments",
        "name": name,
        "env_class": "dev",
        "ttl_hours": 8,
        "workload_class": "standard",
        "cpu": 2,
        "memory_gib": 4,
        "gpu": 0,
    }
    body.update(over)
    status, payload = call(kiln, "POST", "/api/v1/environments/", role, body)
    assert status in (200, 201), payload
    return payload


def environment_status(kiln: Standalone, public_id: str, want: str, timeout: float = 60.0) -> dict:
    """Wait until the environment reaches status `want`; returns its JSON."""

    def reached():
        _, payload = call(kiln, "GET", f"/api/v1/environments/{public_id}/", "engineer")
        return payload if payload and payload.get("status") == want else None

    return wait_for(reached, timeout=timeout, what=f"{public_id} to be {want}")


def payments_service(kiln: Standalone, name: str, traffic: str) -> dict:
    """A new service `name` of payments in payments-prod, its simulated traffic of class
    `traffic` (low_traffic, high_volume...); returns its JSON."""
    body = {
        "team": "payments",
        "name": name,
        "namespace": "payments-prod",
        "sim_traffic_class": traffic,
    }
    return post(kiln, "/api/v1/canary/services/", body)


def running_rollout(kiln: Standalone, name: str) -> dict:
    """A new payments service `name` and a rollout of it that stays at its first step for the
    rest of the session (an hour a tick); returns the rollout's JSON once it runs."""
    service = payments_service(kiln, name, "low_traffic")
    body = {
        "service": service["id"],
        "baseline_version": "v1",
        "canary_version": "v2",
        "steps": [5, 100],
        "ticks_per_step": 5,
        "tick_seconds": 3600,
    }
    status, rollout = call(kiln, "POST", "/api/v1/rollouts/", "engineer", body)
    assert status == 201, rollout

    def runs():
        _, detail = call(kiln, "GET", f"/api/v1/rollouts/{rollout['id']}/", "engineer")
        return detail["rollout"] if detail["rollout"]["status"] == "running" else None

    return wait_for(runs, what=f"rollout {name} to run")


def running_experiment(kiln: Standalone, name: str, seconds: int = 300) -> dict:
    """A chaos experiment on payments-prod's checkout pods, live for `seconds`; returns its JSON."""
    body = {
        "name": name,
        "namespace": "payments-prod",
        "selector": {"app": "checkout"},
        "service": "checkout",
        "fault": "http-delay",
        "delay_ms": 200,
        "percent": 10.0,
        "duration_seconds": seconds,
        "max_duration_seconds": seconds * 2,
        "max_pods": 1,
        "max_percent": 25.0,
        "stop_conditions": [],
    }
    status, experiment = call(kiln, "POST", "/api/v1/chaos/experiments/", "engineer", body)
    assert status == 201 and experiment["status"] == "running", experiment
    return experiment


def stop(kiln: Standalone, *, rollout: dict | None = None, experiment: dict | None = None) -> None:
    """Abort what a test started, so the pages of later tests do not show it running."""
    if rollout:
        path = f"/api/v1/rollouts/{rollout['id']}/abort/"
        call(kiln, "POST", path, "engineer", {"reason": "test over"})
    if experiment:
        path = f"/api/v1/chaos/experiments/{experiment['id']}/abort/"
        call(kiln, "POST", path, "engineer", {"reason": "test over"})
