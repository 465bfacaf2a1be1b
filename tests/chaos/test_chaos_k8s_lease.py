# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""With the kubernetes backend the lease is also a coordination.k8s.io/v1 Lease.

The real `kubernetes` client (the kubernetes delivery backend's ApiClient,
configured by KILN_KUBE_API_URL) talks to a small local API server (below) that
keeps Leases with Kubernetes' optimistic concurrency: a PUT whose
metadata.resourceVersion is stale is a 409 Conflict.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection

from canary.chaos.models import ChaosLease
from canary.chaos.services import (
    LeaseNotHeld,
    experiment_create,
    fault_inject,
    fault_lease_acquire,
    fault_lease_release,
    fault_lease_renew,
)
from kiln.cluster.lease import KubernetesLease
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    admin,
    audit_actions,
    backend,
    chaos_settings,
    shop,
)
from tests.support.serving import serve_in_thread

pytestmark = pytest.mark.django_db

PATH = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/?]+))?")


class LeaseServer(ThreadingHTTPServer):
    """A tiny API server for coordination.k8s.io/v1 Leases (GET, POST, PUT, DELETE)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), LeaseHandler)
        self.leases: dict[tuple[str, str], dict] = {}
        self.rv = 0
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.bump_before_next_put = False

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)


class LeaseHandler(BaseHTTPRequestHandler):
    server: LeaseServer

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str) -> None:
        self._send(
            code,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": reason,
                "code": code,
            },
        )

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

    def _route(self):
        m = PATH.match(self.path)
        if not m:
            self._status(404, "NotFound")
            return None
        return m.group(1), m.group(2)

    def do_GET(self) -> None:
        self.server.requests.append(("GET", self.path))
        route = self._route()
        if route is None:
            return
        with self.server.lock:
            lease = self.server.leases.get(route)
        self._send(200, lease) if lease else self._status(404, "NotFound")

    def do_POST(self) -> None:
        self.server.requests.append(("POST", self.path))
        route = self._route()
        if route is None:
            return
        body = self._body()
        key = (route[0], body["metadata"]["name"])
        with self.server.lock:
            if key in self.server.leases:
                return self._status(409, "AlreadyExists")
            body["metadata"]["resourceVersion"] = self.server.next_rv()
            body["metadata"]["namespace"] = route[0]
            body.setdefault("apiVersion", "coordination.k8s.io/v1")
            body.setdefault("kind", "Lease")
            self.server.leases[key] = body
        self._send(201, body)

    def do_PUT(self) -> None:
        self.server.requests.append(("PUT", self.path))
        route = self._route()
        if route is None:
            return
        body = self._body()
        with self.server.lock:
            current = self.server.leases.get(route)
            if current is None:
                return self._status(404, "NotFound")
            if self.server.bump_before_next_put:  # someone else wrote between our GET and PUT
                self.server.bump_before_next_put = False
                current["metadata"]["resourceVersion"] = self.server.next_rv()
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return self._status(409, "Conflict")
            body["metadata"]["resourceVersion"] = self.server.next_rv()
            self.server.leases[route] = body
        self._send(200, body)

    def do_DELETE(self) -> None:
        self.server.requests.append(("DELETE", self.path))
        route = self._route()
        if route is None:
            return
        length = int(self.headers.get("Content-Length") or 0)
        options = json.loads(self.rfile.read(length) or b"{}") if length else {}
        wanted = ((options or {}).get("preconditions") or {}).get("resourceVersion")
        with self.server.lock:
            current = self.server.leases.get(route)
            if current is not None and wanted and current["metadata"]["resourceVersion"] != wanted:
                return self._status(409, "Conflict")  # as the API server checks a precondition
            existed = self.server.leases.pop(route, None)
        self._send(200, {"kind": "Status", "status": "Success"}) if existed else self._status(
            404, "NotFound"
        )


def _serve() -> LeaseServer:
    server = LeaseServer()
    serve_in_thread(server)
    return server


@pytest.fixture
def api_server(settings):
    """The local API server, reached through the kubernetes delivery backend's own ApiClient."""
    server = _serve()
    settings.KILN_KUBE_API_URL = f"http://127.0.0.1:{server.server_port}"
    settings.KILN_KUBE_TOKEN_FILE = None
    settings.KILN_KUBE_CA_FILE = None
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def outside_transactions(monkeypatch):
    """Every call to the cluster's Lease fails its test when made inside a transaction (no
    cluster call under a row lock); `calls` counts them. For transactional tests only."""
    calls: list[str] = []
    for name in ("read", "replace", "delete"):
        method = getattr(KubernetesLease, name)

        def guarded(self, *args, _method=method, _name=name, **kwargs):
            assert not connection.in_atomic_block, f"Lease {_name} inside a transaction"
            calls.append(_name)
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(KubernetesLease, name, guarded)
    return calls


@pytest.fixture
def exp_on_kubernetes(admin, shop, backend, chaos_settings, api_server):
    exp = experiment_create(actor=admin, data=abort_data(), backend=backend)
    chaos_settings.KILN_DELIVERY_BACKEND = "kubernetes"
    chaos_settings.KILN_CHAOS_LEASE_NAMESPACE = "kiln-system"
    return exp


def _lease(server: LeaseServer, exp) -> dict | None:
    return server.leases.get(("kiln-system", f"kiln-chaos-{exp.pk}"))


def test_acquire_renew_release_mirror_a_coordination_lease(exp_on_kubernetes, api_server):
    exp = exp_on_kubernetes
    assert fault_lease_acquire(experiment_id=exp.pk, holder="controller-a") == 1
    lease = _lease(api_server, exp)
    assert lease["spec"]["holderIdentity"] == "controller-a"
    assert lease["spec"]["leaseDurationSeconds"] == 1 and lease["spec"]["leaseTransitions"] == 1
    first_rv, first_renew = lease["metadata"]["resourceVersion"], lease["spec"]["renewTime"]

    assert fault_lease_renew(experiment_id=exp.pk, holder="controller-a", term=1)
    lease = _lease(api_server, exp)
    assert int(lease["metadata"]["resourceVersion"]) > int(first_rv)
    assert lease["spec"]["renewTime"] >= first_renew
    assert (
        "PUT",
        f"/apis/coordination.k8s.io/v1/namespaces/kiln-system/leases/kiln-chaos-{exp.pk}",
    ) in api_server.requests

    assert fault_lease_release(experiment_id=exp.pk, holder="controller-a", term=1)
    assert _lease(api_server, exp) is None and ChaosLease.objects.get(pk=exp.pk).holder == ""


@pytest.mark.django_db(transaction=True)
def test_the_cluster_lease_is_written_outside_every_transaction(
    exp_on_kubernetes, api_server, outside_transactions
):
    exp = exp_on_kubernetes
    assert fault_lease_acquire(experiment_id=exp.pk, holder="controller-a") == 1
    assert fault_lease_renew(experiment_id=exp.pk, holder="controller-a", term=1)
    api_server.bump_before_next_put = True  # the renewal's write is refused: the term lapses
    assert not fault_lease_renew(experiment_id=exp.pk, holder="controller-a", term=1)
    assert fault_lease_acquire(experiment_id=exp.pk, holder="controller-b") == 2
    assert fault_lease_release(experiment_id=exp.pk, holder="controller-b", term=2)
    assert {"read", "replace", "delete"} <= set(outside_transactions)


def test_a_lease_held_by_someone_else_in_the_cluster_blocks_renewal_and_takeover(
    exp_on_kubernetes, api_server
):
    exp = exp_on_kubernetes
    fault_lease_acquire(experiment_id=exp.pk, holder="controller-a")
    _lease(api_server, exp)["spec"]["holderIdentity"] = "controller-elsewhere"
    before = ChaosLease.objects.get(pk=exp.pk)
    assert not fault_lease_renew(experiment_id=exp.pk, holder="controller-a", term=1)
    # Read before any write: the database is as it was, and nothing is audited.
    after = ChaosLease.objects.get(pk=exp.pk)
    assert (after.renewals, after.resource_version) == (before.renewals, before.resource_version)
    assert audit_actions()[-1] == "chaos.lease.acquired"
    # Nor may anyone take it over while the cluster names another holder, however long it lapsed.
    ChaosLease.objects.filter(pk=exp.pk).update(renewed_at=None)
    assert fault_lease_acquire(experiment_id=exp.pk, holder="controller-a") is None
    assert fault_lease_acquire(experiment_id=exp.pk, holder="controller-b") is None
    assert ChaosLease.objects.get(pk=exp.pk).transitions == 1
    assert _lease(api_server, exp)["spec"]["holderIdentity"] == "controller-elsewhere"


def test_a_renewal_the_cluster_refuses_after_the_commit_lapses_the_term(
    exp_on_kubernetes, api_server, backend
):
    exp = exp_on_kubernetes
    fault_lease_acquire(experiment_id=exp.pk, holder="controller-a")
    api_server.bump_before_next_put = True  # written between our read and our write
    assert not fault_lease_renew(experiment_id=exp.pk, holder="controller-a", term=1)
    after = ChaosLease.objects.get(pk=exp.pk)
    # The renewal committed before the cluster was asked (no call under the row lock); the
    # refusal then lapses the term, audited: it renews and injects no more.
    assert (after.holder, after.transitions, after.renewed_at) == ("controller-a", 1, None)
    assert audit_actions()[-1] == "chaos.lease.revoked"
    assert not fault_lease_renew(experiment_id=exp.pk, holder="controller-a", term=1)
    with pytest.raises(LeaseNotHeld):
        fault_inject(experiment_id=exp.pk, holder="controller-a", term=1, backend=backend)
    # The Lease still names controller-a, as the database does: the next term starts cleanly.
    assert fault_lease_acquire(experiment_id=exp.pk, holder="controller-b") == 2
    assert _lease(api_server, exp)["spec"]["holderIdentity"] == "controller-b"


def test_an_acquisition_the_cluster_refuses_holds_nothing(exp_on_kubernetes, api_server, backend):
    exp = exp_on_kubernetes
    fault_lease_acquire(experiment_id=exp.pk, holder="controller-a")
    fault_lease_release(experiment_id=exp.pk, holder="controller-a", term=1)
    assert _lease(api_server, exp) is None
    key = ("kiln-system", f"kiln-chaos-{exp.pk}")
    # Someone else's Lease of the same name: refused before any write.
    api_server.leases[key] = {
        "metadata": {"name": key[1], "resourceVersion": api_server.next_rv()},
        "spec": {"holderIdentity": "controller-elsewhere"},
    }
    assert fault_lease_acquire(experiment_id=exp.pk, holder="controller-b") is None
    assert ChaosLease.objects.get(pk=exp.pk).transitions == 1
    assert audit_actions()[-1] == "chaos.lease.released"
    # A free Lease written again between our read and our write: the term begins and lapses.
    api_server.leases[key]["spec"]["holderIdentity"] = None
    api_server.bump_before_next_put = True
    assert fault_lease_acquire(experiment_id=exp.pk, holder="controller-b") is None
    lease = ChaosLease.objects.get(pk=exp.pk)
    assert (lease.holder, lease.transitions, lease.renewed_at) == ("controller-b", 2, None)
    assert audit_actions()[-2:] == ["chaos.lease.acquired", "chaos.lease.revoked"]
    with pytest.raises(LeaseNotHeld):
        fault_inject(experiment_id=exp.pk, holder="controller-b", term=2, backend=backend)


def test_a_release_leaves_a_lease_another_holder_took_since(exp_on_kubernetes, api_server):
    exp = exp_on_kubernetes
    fault_lease_acquire(experiment_id=exp.pk, holder="controller-a")
    # After the release commits, before its delete, controller-c's term is written there.
    _lease(api_server, exp)["spec"]["holderIdentity"] = "controller-c"
    assert fault_lease_release(experiment_id=exp.pk, holder="controller-a", term=1)
    assert _lease(api_server, exp)["spec"]["holderIdentity"] == "controller-c"
