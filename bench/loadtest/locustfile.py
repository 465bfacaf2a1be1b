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

Every user sends one malformed call in twenty, and every failed answer (4xx, 5xx, wire) is counted;
the run's configuration, those counts and the report written when the run stops are in
`locust_shared`, which this file imports by its own name: locust puts the locustfile's folder
on the import path, in a process of its own that imports nothing of Kiln (no Django).
"""

from __future__ import annotations

import json
import random
import secrets
import time
from typing import Any

import gevent
import websocket
from locust import HttpUser, between, constant, events, task
from locust.exception import StopUser
from locust_shared import (
    CONFIG,
    ENV_URL,
    SETTLED,
    WAIT_ROUTE,
    WAIT_SECONDS,
    auth_headers,
    lock,
    maybe_malformed,
    request_body,
    seen,
)


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
        with lock:
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
            with lock:
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
        maybe_malformed(self, self.token)
        headers = auth_headers(
            self.token,
            **{"Idempotency-Key": n, "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"},
        )
        record["submitted_at"] = time.time()
        answer = self._call(
            "POST", ENV_URL, "/environments/", data=json.dumps(request_body(n, staging)),
            headers=headers,
        )  # fmt: skip
        record["create_status"] = answer.status_code
        if answer.status_code not in (200, 201):
            with lock:
                seen["environments"].append(record)
            return
        env_id = answer.json()["id"]
        record["id"] = env_id
        status, etag = answer.json()["status"], answer.headers.get("ETag", "")
        deadline = time.time() + CONFIG["ready_timeout"]
        while status not in SETTLED and time.time() < deadline:
            # Follow it without polling: answered when it changes (304 after WAIT_SECONDS).
            maybe_malformed(self, self.token)
            detail = self._call(
                "GET", f"{ENV_URL}{env_id}/", WAIT_ROUTE,
                headers=auth_headers(
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
            headers=auth_headers(self.token),
        )  # fmt: skip
        time.sleep(self.wait_time())
        gone = self._call(
            "DELETE", f"{ENV_URL}{env_id}/", "/environments/{id}/", headers=auth_headers(self.token)
        )
        record["delete_status"] = gone.status_code
        with lock:
            seen["environments"].append(record)


class Approver(HttpUser):
    """Approves the team's pending requests."""

    wait_time = constant(0.3)
    fixed_count = 1

    @task
    def approve_pending(self) -> None:
        token = CONFIG["tokens"]["approver"]
        maybe_malformed(self, token)
        page = self.client.get(
            f"{ENV_URL}?team={CONFIG['team']}&status=PENDING_APPROVAL&limit=50",
            headers=auth_headers(token), name="/environments/?status=PENDING_APPROVAL",
        )  # fmt: skip
        if page.status_code != 200:
            return
        for env in page.json()["results"]:
            with self.client.post(
                f"{ENV_URL}{env['id']}/approve/", data=json.dumps({"reason": "load test"}),
                headers=auth_headers(token), name="/environments/{id}/approve/",
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
        maybe_malformed(self, token)
        for arm in ("baseline", "canary"):
            body = {
                "arm": arm,
                "requests": 200,
                "errors": random.randint(0, 2),
                "latencies_ms": [random.lognormvariate(3, 0.4) for _ in range(20)],
            }
            self.client.post(
                f"/api/v1/rollouts/{CONFIG['rollout']}/observations/", data=json.dumps(body),
                headers=auth_headers(token), name="/rollouts/{id}/observations/",
            )  # fmt: skip


class Auditor(HttpUser):
    """Pages recent audit events and exports a range."""

    wait_time = between(1.0, 2.0)
    fixed_count = 1

    @task(3)
    def events(self) -> None:
        token = CONFIG["tokens"]["auditor"]
        maybe_malformed(self, token)
        self.client.get(
            "/api/v1/audit/events/?limit=50", headers=auth_headers(token), name="/audit/events/"
        )

    @task(1)
    def export(self) -> None:
        token = CONFIG["tokens"]["auditor"]
        self.client.get(
            f"/api/v1/audit/export?from={CONFIG['started_at']}", headers=auth_headers(token),
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
        with lock:
            seen["websocket"]["opened"] += 1
        held_until = time.time() + CONFIG["websocket_hold_seconds"]
        try:
            while time.time() < held_until:
                try:
                    if socket.recv():
                        with lock:
                            seen["websocket"]["messages"] += 1
                except websocket.WebSocketTimeoutException:
                    continue
        except (OSError, websocket.WebSocketException) as exc:
            with lock:
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
