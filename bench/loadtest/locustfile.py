"""The load test's mix over real HTTP, for locust (run by `manage.py loadtest`; no Django here).

Who calls what, each a locust user class:

- `Engineer` (one per concurrent engineer): submits an environment (one in five staging, which
  an approver must approve), follows its detail until READY (a conditional GET with
  `Prefer: wait`, answered when the environment changes), lists the team's environments and
  deletes it; `environments` requests each, then it stops. Before each next step it thinks
  (`think_seconds`, uniform: a person reading the answer); with (0, 0) it never does. Every
  submission carries an Idempotency-Key and its own W3C traceparent, and a call that fails on
  the wire or with a 5xx is retried with the same key, as a careful client does while
  something restarts.
- `Approver`: approves the team's pending requests.
- `RolloutPusher`: pushes baseline and canary observations to one rollout.
- `Auditor`: pages the audit events and exports a range.
- `Dashboard`: holds the rollout's websocket open and reads what it streams.
- `Scheduler`: calls the extender's filter and prioritize, as kube-scheduler does per pod.

One call in twenty of every user is malformed (bad JSON, an unknown field, a string for a
number, a name that is not DNS-1123, an unknown query value); each must get a 4xx whose body
names the problem (`code`, `message`), and the reconciliation checks that it changed nothing.

The configuration is the JSON file named by KILN_LOAD_CONFIG; what the run saw is written to
its `out` path when the run stops.

One file, a little past ~400 lines, on purpose: locust loads the mix from this one path in a
process of its own, which imports nothing of Kiln (no Django), so every user class and the
counting it shares stand here together.
"""

from __future__ import annotations

import json
import os
import random
import resource
import secrets
import threading
import time
from collections import Counter
from typing import Any

import gevent
import websocket
from locust import HttpUser, between, constant, events, task
from locust.exception import StopUser

CONFIG: dict[str, Any] = json.loads(open(os.environ["KILN_LOAD_CONFIG"]).read())  # noqa: SIM115
MALFORMED_SHARE = 0.05
SETTLED = {"READY", "FAILED", "DENIED", "REJECTED"}
ENV_URL = "/api/v1/environments/"
WAIT_SECONDS = 10
WAIT_ROUTE = "/environments/{id}/ (Prefer: wait)"  # its time is waiting: not in the API p95

_lock = threading.Lock()
seen: dict[str, Any] = {
    "environments": [],  # one record per environment an engineer submitted
    "errors": Counter(),  # "status route" of every non-2xx answer and wire failure
    "server_errors": [],  # (time, status, route) of every 5xx and wire failure
    "malformed": Counter(),  # sent / answered_4xx_with_reason / wrong_answer
    "websocket": Counter(),
    "engineers_done": 0,
}


def _headers(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **extra}


@events.request.add_listener
def _count(request_type, name, response_time, response_length, response=None, exception=None, **kw):
    if exception is None and response is None:  # a websocket opened
        return
    status = getattr(response, "status_code", 0) if response is not None else 0
    if 200 <= status < 400 and exception is None:
        return
    with _lock:
        seen["errors"][f"{status or 'connection'} {request_type} {name}"] += 1
        if status == 0 or status >= 500:
            seen["server_errors"].append((time.time(), status, f"{request_type} {name}"))


def _malformed(user: HttpUser, token: str) -> None:
    """One malformed call; it must be a 4xx with a reason."""
    kind = random.choice(["json", "unknown", "string", "name", "query", "approve"])
    headers = _headers(token)
    body: Any
    if kind == "json":
        method, url, body = "POST", ENV_URL, b'{"team": "x", "name": '
    elif kind == "unknown":
        method, url, body = "POST", ENV_URL, json.dumps({**_request_body("bad"), "colour": "red"})
    elif kind == "string":
        method, url, body = "POST", ENV_URL, json.dumps({**_request_body("bad"), "cpu": "four"})
    elif kind == "name":
        method, url, body = "POST", ENV_URL, json.dumps(_request_body("Not_DNS!"))
    elif kind == "query":
        method, url, body = "GET", f"{ENV_URL}?status=SIDEWAYS", None
    else:
        method, url, body = "POST", f"{ENV_URL}no-such-id/approve/", b"[1, 2]"
    with user.client.request(
        method, url, data=body, headers=headers, name=f"malformed {kind}", catch_response=True
    ) as answer:
        with _lock:
            seen["malformed"]["sent"] += 1
        try:
            reason = answer.json()
        except ValueError:
            reason = {}
        if 400 <= answer.status_code < 500 and reason.get("code") and reason.get("message"):
            answer.success()
            with _lock:
                seen["malformed"]["answered_4xx_with_reason"] += 1
        else:
            answer.failure(f"malformed {kind}: {answer.status_code}")
            with _lock:
                seen["malformed"][f"wrong_answer {answer.status_code}"] += 1


def _maybe_malformed(user: HttpUser, token: str) -> None:
    if random.random() < MALFORMED_SHARE:
        _malformed(user, token)


def _request_body(name: str, staging: bool = False) -> dict[str, Any]:
    return {
        "team": CONFIG["team"],
        "name": name,
        "env_class": "staging" if staging else "dev",
        "ttl_hours": 24,
        "workload_class": "standard",
        "cpu": 1,
        "memory_gib": 1,
    }


class Engineer(HttpUser):
    """Requests, follows, lists and deletes environments, thinking between steps; stops after
    its share."""

    weight = 0
    fixed_count = CONFIG["engineers"]

    def wait_time(self) -> float:
        """A person's pause before the next step: reading the answer, then clicking on."""
        low, high = CONFIG["think_seconds"]
        return random.uniform(low, high)

    def on_start(self) -> None:
        with _lock:
            seen["engineers_started"] = index = seen.get("engineers_started", 0) + 1
        tokens = CONFIG["tokens"]["engineers"]
        self.token = tokens[index % len(tokens)]
        self.done = 0
        time.sleep(self.wait_time())  # people do not all click at the same instant

    def _call(self, method: str, url: str, name: str, retry_key: str | None = None, **kw):
        """A call that is retried (same Idempotency-Key) while the wire or the server fails."""
        deadline = time.time() + CONFIG["retry_seconds"]
        while True:
            answer = self.client.request(method, url, name=name, **kw)
            if answer.status_code and answer.status_code < 500:
                return answer
            if time.time() > deadline:
                return answer
            time.sleep(0.5)

    @task
    def one_environment(self) -> None:
        if self.done >= CONFIG["environments_per_engineer"]:
            with _lock:
                seen["engineers_done"] += 1
                if seen["engineers_done"] >= CONFIG["engineers"]:
                    # From its own greenlet: quit() stops this user too.
                    gevent.spawn_later(1.0, self.environment.runner.quit)
            raise StopUser()
        self.done += 1
        n = f"{CONFIG['run']}-{secrets.token_hex(3)}"
        staging = random.random() < 0.2
        trace_id = secrets.token_hex(16)
        record: dict[str, Any] = {"name": n, "staging": staging, "trace_id": trace_id}
        _maybe_malformed(self, self.token)
        headers = _headers(
            self.token,
            **{"Idempotency-Key": n, "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"},
        )
        record["submitted_at"] = time.time()
        answer = self._call(
            "POST", ENV_URL, "/environments/", data=json.dumps(_request_body(n, staging)),
            headers=headers,
        )  # fmt: skip
        record["create_status"] = answer.status_code
        if answer.status_code not in (200, 201):
            with _lock:
                seen["environments"].append(record)
            return
        env_id = answer.json()["id"]
        record["id"] = env_id
        status, etag = answer.json()["status"], answer.headers.get("ETag", "")
        deadline = time.time() + CONFIG["ready_timeout"]
        while status not in SETTLED and time.time() < deadline:
            # Follow it without polling: answered when it changes (304 after WAIT_SECONDS).
            _maybe_malformed(self, self.token)
            detail = self._call(
                "GET", f"{ENV_URL}{env_id}/", WAIT_ROUTE,
                headers=_headers(
                    self.token, **{"If-None-Match": etag, "Prefer": f"wait={WAIT_SECONDS}"}
                ),
            )  # fmt: skip
            if detail.status_code == 200:
                status, etag = detail.json()["status"], detail.headers.get("ETag", "")
            elif detail.status_code != 304:
                time.sleep(0.5)  # a 4xx: do not spin on it
        record["status"] = status
        if status == "READY":
            record["ready_at"] = time.time()
        time.sleep(self.wait_time())
        self._call(
            "GET", f"{ENV_URL}?team={CONFIG['team']}&limit=20", "/environments/?team=",
            headers=_headers(self.token),
        )  # fmt: skip
        time.sleep(self.wait_time())
        gone = self._call(
            "DELETE", f"{ENV_URL}{env_id}/", "/environments/{id}/", headers=_headers(self.token)
        )
        record["delete_status"] = gone.status_code
        with _lock:
            seen["environments"].append(record)


class Approver(HttpUser):
    """Approves the team's pending requests."""

    wait_time = constant(0.3)
    fixed_count = 1

    @task
    def approve_pending(self) -> None:
        token = CONFIG["tokens"]["approver"]
        _maybe_malformed(self, token)
        page = self.client.get(
            f"{ENV_URL}?team={CONFIG['team']}&status=PENDING_APPROVAL&limit=50",
            headers=_headers(token), name="/environments/?status=PENDING_APPROVAL",
        )  # fmt: skip
        if page.status_code != 200:
            return
        for env in page.json()["results"]:
            with self.client.post(
                f"{ENV_URL}{env['id']}/approve/", data=json.dumps({"reason": "load test"}),
                headers=_headers(token), name="/environments/{id}/approve/",
                catch_response=True,
            ) as answer:  # fmt: skip
                if answer.status_code == 409:  # decided meanwhile by an earlier pass
                    answer.success()


class RolloutPusher(HttpUser):
    """Pushes observations of both arms to the run's rollout."""

    wait_time = constant(0.5)
    fixed_count = 1

    @task
    def push(self) -> None:
        token = CONFIG["tokens"]["admin"]
        _maybe_malformed(self, token)
        for arm in ("baseline", "canary"):
            body = {
                "arm": arm,
                "requests": 200,
                "errors": random.randint(0, 2),
                "latencies_ms": [random.lognormvariate(3, 0.4) for _ in range(20)],
            }
            self.client.post(
                f"/api/v1/rollouts/{CONFIG['rollout']}/observations/", data=json.dumps(body),
                headers=_headers(token), name="/rollouts/{id}/observations/",
            )  # fmt: skip


class Auditor(HttpUser):
    """Pages recent audit events and exports a range."""

    wait_time = between(1.0, 2.0)
    fixed_count = 1

    @task(3)
    def events(self) -> None:
        token = CONFIG["tokens"]["auditor"]
        _maybe_malformed(self, token)
        self.client.get(
            "/api/v1/audit/events/?limit=50", headers=_headers(token), name="/audit/events/"
        )

    @task(1)
    def export(self) -> None:
        token = CONFIG["tokens"]["auditor"]
        self.client.get(
            f"/api/v1/audit/export?from={CONFIG['started_at']}", headers=_headers(token),
            name="/audit/export",
        )  # fmt: skip


class Dashboard(HttpUser):
    """Holds the rollout's websocket open (a platform engineer's dashboard)."""

    wait_time = constant(0)
    fixed_count = CONFIG["dashboards"]

    @task
    def watch(self) -> None:
        url = (
            CONFIG["base_url"].replace("http", "ws", 1)
            + f"/ws/rollouts/{CONFIG['rollout']}/?token={CONFIG['tokens']['admin']}"
        )
        started = time.perf_counter()
        try:
            socket = websocket.create_connection(
                url, timeout=5, origin=CONFIG["base_url"], header=[]
            )
        except (OSError, websocket.WebSocketException) as exc:
            events.request.fire(
                request_type="WS", name="connect /ws/rollouts/{id}/", response_time=0,
                response_length=0, exception=exc, response=None, context={},
            )  # fmt: skip
            time.sleep(1.0)
            return
        events.request.fire(
            request_type="WS", name="connect /ws/rollouts/{id}/",
            response_time=(time.perf_counter() - started) * 1000, response_length=0,
            exception=None, response=None, context={},
        )  # fmt: skip
        with _lock:
            seen["websocket"]["opened"] += 1
        held_until = time.time() + CONFIG["websocket_hold_seconds"]
        try:
            while time.time() < held_until:
                try:
                    if socket.recv():
                        with _lock:
                            seen["websocket"]["messages"] += 1
                except websocket.WebSocketTimeoutException:
                    continue
        except (OSError, websocket.WebSocketException) as exc:
            with _lock:
                seen["websocket"][f"closed early ({type(exc).__name__} {exc})"[:120]] += 1
        finally:
            socket.close()


class Scheduler(HttpUser):
    """Calls the extender as kube-scheduler does: filter, then prioritize what passed."""

    wait_time = constant(0.05)
    fixed_count = 1

    @task
    def schedule_one(self) -> None:
        names = CONFIG["node_names"]
        i = random.randrange(1 << 20)
        labels = {"app": f"load-{i}", "kiln.dev/workload-class": random.choice(
            ["latency-sensitive", "standard", "batch"])}  # fmt: skip
        pod = {
            "metadata": {"name": f"load-{i}", "namespace": "default", "labels": labels},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "250m"}}}]},
        }
        sample = random.sample(names, min(len(names), CONFIG["node_list_size"]))
        base = CONFIG["extender_url"]
        body = {"Pod": pod, "Nodes": None, "NodeNames": sample}
        answer = self.client.post(
            f"{base}/scheduler/filter", data=json.dumps(body), name="extender /scheduler/filter"
        )
        if answer.status_code != 200:
            return
        passing = answer.json().get("NodeNames") or []
        self.client.post(
            f"{base}/scheduler/prioritize",
            data=json.dumps({**body, "NodeNames": passing}),
            name="extender /scheduler/prioritize",
        )


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@events.test_start.add_listener
def _started(environment, **kw) -> None:
    seen["cpu_at_start"] = _cpu_seconds()


@events.quitting.add_listener
def _write(environment, **kw) -> None:
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
    with _lock:
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
