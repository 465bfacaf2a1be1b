"""The web alone under concurrent environment requests over HTTP: its CPU per request and the
create's latency, a run per round.

Each run starts the web as `make dev` does (uvicorn, `web_processes` processes) with nothing
else of the shape: the requests are staging, which waits for an approver, so no task is
queued and no worker is needed. `clients` threads each send `requests` creates over one
keep-alive connection, one after the other, after one unmeasured request each (the processes'
first). The run reports the web's CPU per request (every uvicorn process, from /proc) and the
create's latency; then the approver rejects every environment it made, and the web stops.
"""

from __future__ import annotations

import secrets
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench.portal import harness
from bench.portal.clients import HttpApi
from bench.portal.report import percentile
from kiln.identity.permissions import APPROVER, ENGINEER
from tests.support.shape import Shape, TokenIssuer, free_port, wait_for_port


def run(
    *,
    rounds: int,
    clients: int,
    requests: int,
    web_processes: int,
    workdir: Path,
    engineer: Any,
    approver: Any,
) -> dict[str, Any]:
    """One run per round: each run's figures and their medians."""
    issuer = TokenIssuer(workdir / "jwt", "web-bench-1")
    runs = []
    for round_number in range(1, rounds + 1):
        figures = _one(
            clients=clients,
            requests=requests,
            web_processes=web_processes,
            workdir=workdir / f"run-{round_number}",
            issuer=issuer,
            engineer=engineer,
            approver=approver,
        )
        runs.append({"round": round_number, **figures})
    medians = {
        key: round(statistics.median(r[key] for r in runs), 1)
        for key in ("web_cpu_ms_per_request", "p50_ms", "p95_ms", "requests_per_second")
    }
    return {"runs": runs, "medians": medians}


def _one(
    *,
    clients: int,
    requests: int,
    web_processes: int,
    workdir: Path,
    issuer: TokenIssuer,
    engineer: Any,
    approver: Any,
) -> dict[str, Any]:
    environment = {
        **issuer.environment(),
        "KILN_DELIVERY_BACKEND": "simulated",
        "KILN_TEAM_LIMITS": harness.TEAM_LIMITS,
        "KILN_SECURE_COOKIES": "0",
    }
    shape = Shape(
        port=free_port(),
        environment=environment,
        workdir=workdir,
        names=("web",),
        web_processes=web_processes,
    )
    api = HttpApi(
        port=shape.port,
        engineer_token=issuer.sign(engineer.username, [ENGINEER], harness.TEAM),
        approver_token=issuer.sign(approver.username, [APPROVER], harness.TEAM),
    )
    run_id = "w" + secrets.token_hex(3)
    made: list[str] = []
    latencies: list[float] = []
    errors: list[int] = []
    lock = threading.Lock()

    def create(client: int, i: int, measured: bool) -> None:
        body = {
            "team": harness.TEAM,
            "name": f"{run_id}-{client}-{i}",
            "env_class": "staging",
            "ttl_hours": 24,
            "workload_class": "standard",
            "cpu": 1,
            "memory_gib": 1,
        }
        started = time.perf_counter()
        status, answer = api.create(body, f"{run_id}-{client}-{i}")
        elapsed = time.perf_counter() - started
        with lock:
            if status != 201:
                errors.append(status)
                return
            made.append(answer["id"])
            if measured:
                latencies.append(elapsed)

    def client_loop(client: int) -> None:
        for i in range(requests):
            create(client, i, measured=True)

    shape.start("web")
    try:
        wait_for_port(shape.port, timeout=60.0)
        warm = [threading.Thread(target=create, args=(c, -1, False)) for c in range(clients)]
        _run_all(warm)
        cpu_before, started = shape.cpu_seconds()["web"], time.perf_counter()
        _run_all([threading.Thread(target=client_loop, args=(c,)) for c in range(clients)])
        wall, cpu = time.perf_counter() - started, shape.cpu_seconds()["web"] - cpu_before
        for env_id in made:  # nothing of the bench stays waiting for an approver
            api.reject(env_id, "web bench finished")
    finally:
        shape.stop_all()
    if errors or not latencies:
        raise RuntimeError(f"web bench: creates answered {sorted(set(errors))}")
    return {
        "requests": len(latencies),
        "web_cpu_ms_per_request": round(cpu * 1000 / len(latencies), 1),
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p95_ms": round(percentile(latencies, 95) * 1000, 1),
        "requests_per_second": round(len(latencies) / wall, 1),
    }


def _run_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
