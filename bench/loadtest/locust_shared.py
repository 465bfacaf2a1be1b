"""What the load test's locust users share (imported by `locustfile`; no Django here): the run's
configuration, the counts every user adds to, the malformed calls, and the report written when
the run stops.

One call in twenty of every user is malformed (bad JSON, an unknown field, a string for a
number, a name that is not DNS-1123, an unknown query value); each must get a 4xx whose body
names the problem (`code`, `message`), and the reconciliation checks that it changed nothing.

The configuration is the JSON file named by KILN_LOAD_CONFIG; what the run saw is written to
its `out` path when the run stops. Locust imports this module by its own name, from the
locustfile's folder, in a process that imports nothing of Kiln.
"""

from __future__ import annotations

import json
import os
import random
import resource
import threading
import time
from collections import Counter
from typing import Any

from locust import HttpUser, events

CONFIG: dict[str, Any] = json.loads(open(os.environ["KILN_LOAD_CONFIG"]).read())  # noqa: SIM115
MALFORMED_SHARE = 0.05
SETTLED = {"READY", "FAILED", "DENIED", "REJECTED"}
ENV_URL = "/api/v1/environments/"
WAIT_SECONDS = 10
WAIT_ROUTE = "/environments/{id}/ (Prefer: wait)"  # its time is waiting: not in the API p95

lock = threading.Lock()
seen: dict[str, Any] = {
    "environments": [],  # one record per environment an engineer submitted
    "errors": Counter(),  # "status route" of every non-2xx answer and wire failure
    "server_errors": [],  # (time, status, route) of every 5xx and wire failure
    "malformed": Counter(),  # sent / answered_4xx_with_reason / wrong_answer
    "websocket": Counter(),
    "engineers_done": 0,
}


def auth_headers(token: str, **extra: str) -> dict[str, str]:
    """The bearer token and JSON content type every call sends, with `extra` beside them."""
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **extra}


@events.request.add_listener
def _count(request_type, name, response_time, response_length, response=None, exception=None, **kw):
    if exception is None and response is None:  # a websocket opened
        return
    status = getattr(response, "status_code", 0) if response is not None else 0
    if 200 <= status < 400 and exception is None:
        return
    with lock:
        seen["errors"][f"{status or 'connection'} {request_type} {name}"] += 1
        if status == 0 or status >= 500:
            seen["server_errors"].append((time.time(), status, f"{request_type} {name}"))


def _malformed(user: HttpUser, token: str) -> None:
    """One malformed call; it must be a 4xx with a reason."""
    kind = random.choice(["json", "unknown", "string", "name", "query", "approve"])
    headers = auth_headers(token)
    body: Any
    if kind == "json":
        method, url, body = "POST", ENV_URL, b'{"team": "x", "name": '
    elif kind == "unknown":
        method, url, body = "POST", ENV_URL, json.dumps({**request_body("bad"), "colour": "red"})
    elif kind == "string":
        method, url, body = "POST", ENV_URL, json.dumps({**request_body("bad"), "cpu": "four"})
    elif kind == "name":
        method, url, body = "POST", ENV_URL, json.dumps(request_body("Not_DNS!"))
    elif kind == "query":
        method, url, body = "GET", f"{ENV_URL}?status=SIDEWAYS", None
    else:
        method, url, body = "POST", f"{ENV_URL}no-such-id/approve/", b"[1, 2]"
    with user.client.request(
        method, url, data=body, headers=headers, name=f"malformed {kind}", catch_response=True
    ) as answer:
        with lock:
            seen["malformed"]["sent"] += 1
        try:
            reason = answer.json()
        except ValueError:
            reason = {}
        if 400 <= answer.status_code < 500 and reason.get("code") and reason.get("message"):
            answer.success()
            with lock:
                seen["malformed"]["answered_4xx_with_reason"] += 1
        else:
            answer.failure(f"malformed {kind}: {answer.status_code}")
            with lock:
                seen["malformed"][f"wrong_answer {answer.status_code}"] += 1


def maybe_malformed(user: HttpUser, token: str) -> None:
    """One call in twenty (MALFORMED_SHARE): a malformed one, counted by its answer."""
    if random.random() < MALFORMED_SHARE:
        _malformed(user, token)


def request_body(name: str, staging: bool = False) -> dict[str, Any]:
    """A small environment request of the run's team: dev, or staging (which needs approval)."""
    return {
        "team": CONFIG["team"],
        "name": name,
        "env_class": "staging" if staging else "dev",
        "ttl_hours": 24,
        "workload_class": "standard",
        "cpu": 1,
        "memory_gib": 1,
    }


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@events.test_start.add_listener
def _started(environment, **kw) -> None:
    seen["cpu_at_start"] = _cpu_seconds()


@events.quitting.add_listener
def _write(environment, **kw) -> None:
    """The run's report, written to the config's `out` when locust stops: per route, the total,
    and what the counts saw."""
    routes = {}
    for entry in environment.stats.entries.values():
        routes[f"{entry.method} {entry.name}"] = {
            "requests": entry.num_requests,
            "failures": entry.num_failures,
            "rps": round(entry.total_rps, 2),
            "p50_ms": entry.get_response_time_percentile(0.5),
            "p95_ms": entry.get_response_time_percentile(0.95),
            "p99_ms": entry.get_response_time_percentile(0.99),
        }
    total = environment.stats.total
    with lock:
        out = {
            "routes": routes,
            "total": {
                "requests": total.num_requests,
                "failures": total.num_failures,
                "rps": round(total.total_rps, 2),
                "seconds": round(total.last_request_timestamp - total.start_time, 2)
                if total.last_request_timestamp
                else 0.0,
            },
            "environments": seen["environments"],
            "errors": dict(seen["errors"]),
            "server_errors": seen["server_errors"],
            "malformed": dict(seen["malformed"]),
            "websocket": dict(seen["websocket"]),
            # The load generator's own CPU over the test (it shares the machine's cores).
            "cpu_seconds": round(_cpu_seconds() - seen.get("cpu_at_start", 0.0), 3),
        }
    with open(CONFIG["out"], "w") as handle:  # noqa: PTH123
        json.dump(out, handle)
