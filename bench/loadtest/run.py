"""One load run: start the production shape (or use one that runs), prepare a team, tokens and a
rollout, drive the locust mix over HTTP, inject the run's fault, then settle and reconcile.

Bounded: each engineer carries `environments` requests and the whole run stops after
`max_seconds` whatever happens. Loopback only: every process listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from bench.loadtest import faults, usage
from bench.loadtest.reconcile import advisory_locks_held, reconcile, wait_settled
from kiln.identity import services as identity
from kiln.identity.models import Team
from kiln.identity.permissions import system_actor
from scheduler.models import Node
from tests.support.shape import Shape, TokenIssuer

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
TEAM = "kiln-load"
KID = "kiln-load-1"


@dataclass(frozen=True)
class Plan:
    """What one run does."""

    port: int
    engineers: int = 20
    environments: int = 5  # per engineer
    dashboards: int = 2
    max_seconds: float = 300.0
    fault: str = "none"
    fault_at: float = 10.0  # seconds after the load starts
    node_list_size: int = 600  # about 5% of a 12,477-node cluster, as kube-scheduler sends
    worker_concurrency: int = 2
    web_processes: int = 2  # one per core, as `make dev` runs the web
    # Seconds an engineer takes before each next step (reading the answer, then clicking on):
    # uniform between the two. (0, 0) is the stress mix: every engineer as fast as the answers.
    think: tuple[float, float] = (1.0, 5.0)


def _environment(issuer: TokenIssuer) -> dict[str, str]:
    """The variables of every process: this one's database and Redis, the key pair for tokens,
    the zero-delay simulated cluster."""
    return {
        **issuer.environment(),
        "KILN_DELIVERY_BACKEND": "simulated",
        "KILN_SIM_DELAY_PROFILE": "zero",
        "KILN_SECURE_COOKIES": "0",
        # 20 engineers keep up to 40 environments live (READY and tearing down) at once: above
        # the default team cap of 20, which would deny the rest by policy.
        "KILN_TEAM_LIMITS": "cpu=1000,memoryGi=4000,gpu=8,environments=500",
        "PYTHONUNBUFFERED": "1",
    }


def _tokens(issuer: TokenIssuer, engineers: int) -> dict[str, Any]:
    sign = issuer.sign
    return {
        "engineers": [sign(f"load-engineer-{i}", ["engineer"], TEAM) for i in range(engineers)],
        "approver": sign("load-approver", ["approver"], TEAM),  # approves its own team's
        "auditor": sign("load-auditor", ["auditor"]),
        "admin": sign("load-admin", ["platform-admin"], TEAM),
    }


def _post(base: str, path: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 - loopback
        base + path, method="POST", data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"POST {path}: {exc.code} {exc.read()[:500]!r}") from exc


def _get(base: str, path: str, token: str) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 - loopback
        base + path, headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return json.loads(response.read())


def _rollout(base: str, tokens_: dict[str, Any], run_id: str) -> str:
    """A push-metrics service in one of the team's environments and a rollout on it, for the
    pusher and the dashboards (a service must live in a namespace its team owns)."""
    engineer = tokens_["engineers"][0]
    env = _post(
        base, "/api/v1/environments/", engineer,
        {"team": TEAM, "name": f"{run_id}-rollout", "env_class": "dev", "ttl_hours": 24,
         "cpu": 1, "memory_gib": 1},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while _get(base, f"/api/v1/environments/{env['id']}/", engineer)["status"] != "READY":
        if time.monotonic() > deadline:
            raise RuntimeError("the rollout's environment did not become READY in 60 s")
        time.sleep(0.2)
    service = _post(
        base, "/api/v1/canary/services/", tokens_["admin"],
        {"team": TEAM, "name": "web", "namespace": env["namespace"], "metrics_source": "push"},
    )  # fmt: skip
    rollout = _post(
        base, "/api/v1/rollouts/", tokens_["admin"],
        {"service": service["id"], "baseline_version": "v1", "canary_version": "v2",
         "tick_seconds": 5},
    )  # fmt: skip
    return rollout["id"]


def _node_names(size: int) -> list[str]:
    names = list(Node.objects.order_by("name").values_list("name", flat=True)[: size * 4])
    return names or [f"load-node-{i}" for i in range(size)]


def run(plan: Plan, *, workdir: Path, shape: Shape | None = None) -> dict[str, Any]:
    """Run the plan; returns the report (figures, the fault's recovery, the reconciliation)."""
    workdir.mkdir(parents=True, exist_ok=True)
    run_id = "l" + secrets.token_hex(3)
    since = datetime.now(UTC)
    issuer = TokenIssuer(workdir / "jwt", KID)
    environment = _environment(issuer)
    if not Team.objects.filter(slug=TEAM).exists():
        identity.team_create(actor=system_actor("load-test"), slug=TEAM, name="Load test")
    shape = shape or Shape(
        port=plan.port, environment=environment, workdir=workdir / "processes",
        worker_concurrency=plan.worker_concurrency, web_processes=plan.web_processes,
    )  # fmt: skip
    try:  # a shape that fails to start is stopped all the same: no process outlives the run
        started_shape = shape.start_all()
        token = _tokens(issuer, plan.engineers)
        config = {
            "run": run_id, "team": TEAM, "base_url": shape.base_url,
            "extender_url": f"http://127.0.0.1:{shape.extender_port}",
            "tokens": token, "engineers": plan.engineers,
            "environments_per_engineer": plan.environments, "dashboards": plan.dashboards,
            "think_seconds": list(plan.think),
            "rollout": _rollout(shape.base_url, token, run_id),
            "node_names": _node_names(plan.node_list_size), "node_list_size": plan.node_list_size,
            "ready_timeout": 180.0, "retry_seconds": 60.0,
            "websocket_hold_seconds": 10.0, "out": str(workdir / "locust-out.json"),
            "started_at": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }  # fmt: skip
        (workdir / "config.json").write_text(json.dumps(config))
        users = plan.engineers + plan.dashboards + 4
        cpu_before, servers_before = shape.cpu_seconds(), usage.snapshot()
        injected: dict[str, Any] = {}
        load_started = time.time()
        injector = threading.Thread(
            target=faults.inject, args=(plan.fault, shape, plan.fault_at, injected), daemon=True
        )
        locust = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
             "--users", str(users), "--spawn-rate", str(users), "--run-time",
             f"{int(plan.max_seconds)}s", "--host", shape.base_url, "--only-summary",
             "--stop-timeout", "15", "--loglevel", "WARNING", "--exit-code-on-error", "0"],
            env={**os.environ, "KILN_LOAD_CONFIG": str(workdir / "config.json")},
            stdout=(workdir / "locust.log").open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        injector.start()
        try:
            locust.wait(timeout=plan.max_seconds + 60)
        except subprocess.TimeoutExpired:
            locust.send_signal(signal.SIGINT)
            locust.wait(timeout=30)
        load_seconds = time.time() - load_started
        injector.join(timeout=120)
        seen = json.loads((workdir / "locust-out.json").read_text())
        connection.close()  # opened before the fault; a restarted database has dropped it
        cpu = {k: v - cpu_before.get(k, 0.0) for k, v in shape.cpu_seconds().items()}
        servers_after = usage.snapshot()
        cpu.update(usage.servers(servers_before, servers_after))
        cpu["load_generator"] = seen.get("cpu_seconds", 0.0)
        seen["machine_busy_share"] = usage.busy_share(servers_before, servers_after)
        try:
            seen["web_gc_pauses"] = usage.web_gc_pauses(shape.base_url)
        except OSError as exc:  # a web fault run may end with the web still coming back
            seen["web_gc_pauses"] = {"unavailable": str(exc)}
        # Quiesce: no new periodic work, the rollout ends; then what is in flight must drain.
        shape.kill("beat", signal.SIGTERM)
        _post(shape.base_url, f"/api/v1/rollouts/{config['rollout']}/abort/", token["engineers"][0],
              {"reason": "load test finished"})  # fmt: skip
        settle_seconds = wait_settled(team=TEAM, timeout=240)
        reconciled = reconcile(team=TEAM, run=run_id, since=since, records=seen["environments"])
        reconciled["settle_seconds"] = settle_seconds
    finally:
        shape.stop_all()
    reconciled["advisory_locks_after_stop"] = advisory_locks_held()
    return report(
        plan, seen, reconciled, injected, cpu, load_seconds, settle_seconds, started_shape
    )


def report(
    plan: Plan,
    seen: dict[str, Any],
    reconciled: dict[str, Any],
    injected: dict[str, Any],
    cpu: dict[str, float],
    load_seconds: float,
    settle_seconds: float,
    started_shape: float,
) -> dict[str, Any]:
    """The run's JSON: per-route figures, request-to-READY, errors, the fault, the reconciliation."""
    records = seen["environments"]
    to_ready = _seconds_to_ready(records)
    created = max(1, reconciled["environments_in_database"])
    window = (injected.get("at", 0.0), injected.get("recovered_at", 0.0) + 5.0)
    outside = [e for e in seen["server_errors"] if not window[0] <= e[0] <= window[1]]
    # A waiting read's time is the wait it asked for; like WATCH in Kubernetes' API latency
    # SLO, it is reported per route but not counted in the API's p95.
    api = [
        v
        for k, v in seen["routes"].items()
        if "extender" not in k and not k.startswith("WS") and "Prefer: wait" not in k
    ]
    return {
        "plan": plan.__dict__,
        "shape_started_seconds": round(started_shape, 2),
        "load_seconds": round(load_seconds, 2),
        "settle_seconds": settle_seconds,
        "routes": seen["routes"],
        "total": seen["total"],
        "environments_per_second": round(len(records) / seen["total"]["seconds"], 2)
        if seen["total"]["seconds"]
        else 0.0,
        "api_p95_ms_worst_route": max((v["p95_ms"] for v in api if v["requests"]), default=0),
        "api_p95_excludes": "waiting reads (Prefer: wait), whose time is the wait they ask for",
        "request_to_ready": {
            "environments": len(to_ready),
            "p50_seconds": round(_pct(to_ready, 0.5), 3),
            "p95_seconds": round(_pct(to_ready, 0.95), 3),
            "max_seconds": round(to_ready[-1], 3) if to_ready else 0.0,
            # dev is approved by policy at once; staging waits for the approver's next pass.
            "by_class": {
                name: {
                    "environments": len(part),
                    "p50_seconds": round(_pct(part, 0.5), 3),
                    "p95_seconds": round(_pct(part, 0.95), 3),
                }
                for name, staging in (("dev", False), ("staging", True))
                for part in [
                    _seconds_to_ready([r for r in records if bool(r.get("staging")) is staging])
                ]
            },
            "followed_with": "GET detail, If-None-Match and Prefer: wait=10 (no poll interval)",
        },
        "errors_by_status": _by_status(seen["errors"]),
        "errors": seen["errors"],
        "server_errors": len(seen["server_errors"]),
        "server_errors_outside_fault_window": len(outside),
        "malformed": seen["malformed"],
        "websocket": seen["websocket"],
        "fault": {**injected, "error_budget_spent": len(seen["server_errors"]) - len(outside)},
        "cpu_ms_per_environment": {k: round(v * 1000 / created, 1) for k, v in cpu.items()},
        # Every core's busy share over the load (1.0: saturated); the load generator, the
        # database and Redis share the machine with Kiln's processes.
        "machine_busy_share": seen.get("machine_busy_share"),
        # Garbage collection pauses in the web processes (generation 2: full collections),
        # with their startup objects frozen out of them or not (KILN_GC_FREEZE, kiln/heap.py).
        "web_gc_pauses": seen.get("web_gc_pauses"),
        "web_gc_freeze": settings.KILN_GC_FREEZE,
        "reconciliation": reconciled,
    }


def _seconds_to_ready(records: list[dict[str, Any]]) -> list[float]:
    return sorted(r["ready_at"] - r["submitted_at"] for r in records if r.get("ready_at"))


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]


def _by_status(errors: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, n in errors.items():
        status = key.split(" ", 1)[0]
        out[status] = out.get(status, 0) + n
    return out
