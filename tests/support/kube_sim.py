"""A small real Kubernetes API server on loopback: discovery, server-side apply, get, list,
watch, delete, the status subresource (merge patch), the scale subresource of Deployments and
StatefulSets (read, merge patch of spec.replicas), merge patches of an object's labels and
annotations, and pod bindings.

It speaks HTTP on 127.0.0.1 so the official `kubernetes` client, and so the `kubernetes`
delivery backend, runs end to end without a cluster: the tests use it (as
`tests.cluster.fake_kube.FakeKube`), and `canary_promote_bench --kube-api local` measures the
client's limits against it. Like tests/support/argocd_sim.py, it stands in for a server Kiln
talks to, never for Kiln's own code.

Server-side apply honours a `metadata.resourceVersion` precondition (stale or on a
missing object: 409 Conflict).

Objects become Ready `ready_after` seconds after they are applied (unless named in
`never_ready`); deletion waits for finalizers, which clear after `finalizer_seconds`
unless the object is named in `stuck`. Every request is recorded in `requests`, with the
monotonic time it arrived and the client process it names (`Kiln-Process`), so a caller can
tell the rate each process was served at.

As Kamaji's controller does, once a TenantControlPlane is applied it writes the control plane's
admin kubeconfig Secret (`<name>-admin-kubeconfig`, key `admin.conf`) naming `tenant_url`, when
one is set (another server of this kind: the tenant's API server). `on_write(verb, ref, code,
user_agent)`, when set, is called after every apply and delete, as an API server's audit
backend sees them.

With `rbac` set (an `RBACAuthorizer` holding rendered RBAC objects), each request is
authenticated by its bearer token and authorized as kube-apiserver's RBAC authorizer would:
a denial is a 403 `Status` with the apiserver's wording, and is kept in `denied`. Leases
(`coordination.k8s.io/v1`) are also created (POST) and replaced (PUT, resourceVersion checked).

One module past ~400 lines: its one handler's verbs share the route parsing, the lock and the
simulated controllers, and parts of it apart would each reach into the others' state.
"""

from __future__ import annotations

import base64
import copy
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from kiln.cluster import AppliedRef
from kiln.cluster.base import match_labels
from tests.support.kube_rbac import Attributes, RBACAuthorizer
from tests.support.serving import serve_in_thread

RESOURCES = {
    "v1": [
        ("namespaces", "Namespace", False),
        ("resourcequotas", "ResourceQuota", True),
        ("limitranges", "LimitRange", True),
        ("pods", "Pod", True),
        ("configmaps", "ConfigMap", True),
        ("secrets", "Secret", True),
        ("nodes", "Node", False),
    ],
    "apps/v1": [
        ("deployments", "Deployment", True),
        ("statefulsets", "StatefulSet", True),
        ("daemonsets", "DaemonSet", True),
    ],
    "batch/v1": [("jobs", "Job", True)],
    "coordination.k8s.io/v1": [("leases", "Lease", True)],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
    "rbac.authorization.k8s.io/v1": [("rolebindings", "RoleBinding", True)],
    "flowcontrol.apiserver.k8s.io/v1": [
        ("flowschemas", "FlowSchema", False),
        ("prioritylevelconfigurations", "PriorityLevelConfiguration", False),
    ],
    "kamaji.clastix.io/v1alpha1": [("tenantcontrolplanes", "TenantControlPlane", True)],
    "karpenter.sh/v1": [("nodepools", "NodePool", False)],
    "argoproj.io/v1alpha1": [("applications", "Application", True)],
    "database.kiln.dev/v1alpha1": [("postgresqlinstances", "PostgreSQLInstance", True)],
    "chaos-mesh.org/v1alpha1": [
        ("podchaos", "PodChaos", True),
        ("networkchaos", "NetworkChaos", True),
        ("stresschaos", "StressChaos", True),
        ("dnschaos", "DNSChaos", True),
        ("timechaos", "TimeChaos", True),
    ],
    "networking.istio.io/v1": [
        ("virtualservices", "VirtualService", True),
        ("destinationrules", "DestinationRule", True),
    ],
}


# The finalizer a deleting object shows while `finalizer_seconds` or `stuck` holds it.
HELD_FINALIZER = "kiln.dev/stand-in-finalizer"


class JSONHandler(BaseHTTPRequestHandler):
    """A quiet request handler that answers JSON (this server's, and the simulated Argo CD's)."""

    def log_message(self, *args) -> None:  # quiet: tests and benches read JSON
        return

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class SimulatedKubeAPI:
    """State and behaviour of the simulated API server."""

    def __init__(
        self, ready_after: float = 0.0, finalizer_seconds: float = 0.0, *, port: int = 0
    ) -> None:
        self.objects: dict[tuple[str, str, str, str], dict] = {}
        self.applied_at: dict[tuple, float] = {}
        self.deleted_at: dict[tuple, float] = {}
        self.requests: list[dict] = []
        self.ready_after = ready_after
        self.finalizer_seconds = finalizer_seconds
        self.never_ready: set[str] = set()
        self.stuck: set[str] = set()
        self.status: dict[tuple, dict] = {}  # written through the status subresource or a binding
        self.tenant_url: str | None = None
        self.on_write = None
        # RBAC enforcement (tests/support/kube_rbac.py): off (None) unless a test loads the rendered
        # Roles and bindings; then every request is authorized and denials are kept here.
        self.rbac: RBACAuthorizer | None = None
        self.denied: list[Attributes] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.thread = serve_in_thread(self.server, start=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> SimulatedKubeAPI:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- simulated controllers ----------------------------------------------------

    def _kamaji(self, key) -> None:
        """Write a TenantControlPlane's admin kubeconfig Secret, naming the tenant's API server."""
        if key[:2] != ("kamaji.clastix.io/v1alpha1", "TenantControlPlane") or not self.tenant_url:
            return
        kubeconfig = json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": key[3], "cluster": {"server": self.tenant_url}}],
                "users": [{"name": "kubernetes-admin", "user": {"token": "tenant-admin"}}],
                "contexts": [
                    {"name": "admin", "context": {"cluster": key[3], "user": "kubernetes-admin"}}
                ],
                "current-context": "admin",
            }
        )
        secret = ("v1", "Secret", key[2], f"{key[3]}-admin-kubeconfig")
        self.objects[secret] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret[3], "namespace": key[2], "uid": str(uuid.uuid4()),
                         "generation": 1, "resourceVersion": "1"},
            "data": {"admin.conf": base64.b64encode(kubeconfig.encode()).decode()},
        }  # fmt: skip
        self.applied_at[secret] = time.monotonic()

    def _written(self, verb: str, key, code: int, user_agent: str) -> None:
        if self.on_write is not None:
            self.on_write(verb, AppliedRef(*key), code, user_agent)

    def _reconcile(self) -> None:
        now = time.monotonic()
        # The namespace controller: a terminating namespace deletes its contents first.
        terminating = {k[3] for k in self.deleted_at if k[:2] == ("v1", "Namespace")}
        for key in list(self.objects):
            if key[2] in terminating:
                self.deleted_at.setdefault(key, now)
                self.objects[key]["metadata"].setdefault(
                    "deletionTimestamp", "2026-01-01T00:00:00Z"
                )
        for key, obj in list(self.objects.items()):
            if (
                key in self.deleted_at
                and key[:2] == ("v1", "Namespace")
                and any(k[2] == key[3] for k in self.objects)
            ):
                continue
            if key in self.deleted_at:
                if (
                    obj["metadata"]["name"] not in self.stuck
                    and now - self.deleted_at[key] >= self.finalizer_seconds
                ):
                    del self.objects[key]
                    self.deleted_at.pop(key)
                continue
            ready = (
                obj["metadata"]["name"] not in self.never_ready
                and now - self.applied_at[key] >= self.ready_after
            )
            obj["status"] = {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "Ready" if ready else "Progressing",
                        "message": "",
                    }
                ]
            }
            obj["status"].update(self.status.get(key, {}))

    def _view(self, key) -> dict:
        return copy.deepcopy(self.objects[key])

    # --- HTTP ---------------------------------------------------------------------

    def _handler(self):
        sim = self

        class Handler(JSONHandler):
            def _status(self, code: int, reason: str, message: str) -> None:
                self._send(
                    code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": reason,
                        "message": message,
                        "code": code,
                    },
                )

            def _forbidden(self, verb: str, route, *, name: str | None = None, sub=None) -> bool:
                """Authorize the request when RBAC is on; answer 403 and return True if denied."""
                if sim.rbac is None:
                    return False
                api_version, namespace, plural, _, rname, query = route
                attrs = Attributes(
                    verb=verb,
                    api_group="" if api_version == "v1" else api_version.split("/")[0],
                    resource=plural or "",
                    subresource=query["_subresource"] if sub is None else sub,
                    namespace=namespace,
                    name=(rname or "") if name is None else name,
                )
                who = sim.rbac.authenticate(self.headers.get("Authorization"))
                if sim.rbac.allows(who, attrs):
                    return False
                sim.denied.append(attrs)
                body = {
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": attrs.forbidden_message(who.user), "reason": "Forbidden",
                    "details": {"name": attrs.name, "group": attrs.api_group, "kind": attrs.resource},
                    "code": 403,
                }  # fmt: skip
                self._send(403, body)
                return True

            def _forbidden_grant(self, route, body: dict) -> bool:
                """A RoleBinding may name only a role the writer may `bind` (kube-apiserver's
                escalation check; its other way, holding every permission of the role, is not
                modelled: the simulator does not know the built-in roles' rules)."""
                ref = body.get("roleRef") or {}
                if route[3] != "RoleBinding" or sim.rbac is None:
                    return False
                plural = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
                bind_route = (route[0], route[1], plural, None, None, route[5])
                return self._forbidden("bind", bind_route, name=ref.get("name", ""), sub="")

            def _route(self):
                url = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                parts = [p for p in url.path.split("/") if p]
                if parts[:2] == ["api", "v1"]:
                    api_version, rest = "v1", parts[2:]
                elif parts[:1] == ["apis"] and len(parts) >= 3:
                    api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
                else:
                    return None
                namespace = ""
                if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
                    namespace, rest = rest[1], rest[2:]
                plural = rest[0] if rest else None
                name = rest[1] if len(rest) > 1 else None
                kind = next((k for p, k, _ in RESOURCES.get(api_version, []) if p == plural), None)
                query["_subresource"] = rest[2] if len(rest) > 2 else ""
                return api_version, namespace, plural, kind, name, query

            def _record(self, body=None) -> None:
                sim.requests.append(
                    {
                        "user_agent": self.headers.get("User-Agent"),
                        "method": self.command,
                        "path": self.path,
                        "content_type": self.headers.get("Content-Type"),
                        "process": self.headers.get("Kiln-Process", ""),
                        "body": body,
                        "at": time.monotonic(),
                    }
                )

            def do_GET(self) -> None:  # noqa: N802
                self._record()
                route = self._route()
                if route is None:
                    return self._status(404, "NotFound", "no such path")
                api_version, namespace, plural, kind, name, query = route
                if plural is None:
                    if (
                        sim.rbac is not None
                        and sim.rbac.authenticate(self.headers.get("Authorization")).user
                        == "system:anonymous"
                    ):
                        return self._status(403, "Forbidden", "discovery needs authentication")
                    if api_version not in RESOURCES:
                        return self._status(404, "NotFound", "no such group")
                    return self._send(
                        200,
                        {
                            "kind": "APIResourceList",
                            "groupVersion": api_version,
                            "resources": [
                                {
                                    "name": p,
                                    "kind": k,
                                    "namespaced": n,
                                    "verbs": ["get", "list", "watch", "patch", "delete"],
                                }
                                for p, k, n in RESOURCES[api_version]
                            ],
                        },
                    )
                if kind is None:
                    return self._status(404, "NotFound", f"no resource {plural}")
                field = query.get("fieldSelector", "")
                watching = query.get("watch") in ("true", "1")
                by_name = field.split("=", 1)[1] if field.startswith("metadata.name=") else None
                verb = "get" if name else "watch" if watching else "list"
                if self._forbidden(verb, route, name=name or by_name or ""):
                    return None
                if query["_subresource"] == "scale":
                    return self._scale((api_version, kind, namespace, name), None)
                with sim.lock:
                    sim._reconcile()
                    if name:
                        key = (api_version, kind, namespace, name)
                        if key not in sim.objects:
                            return self._status(404, "NotFound", f"{plural} {name} not found")
                        return self._send(200, sim._view(key))
                    items = [
                        sim._view(k)
                        for k in sim.objects
                        if k[:2] == (api_version, kind) and (not namespace or k[2] == namespace)
                    ]
                selector = query.get("labelSelector")
                if selector:
                    # Equality and existence terms, as the API server accepts them.
                    items = [
                        i for i in items if match_labels(i["metadata"].get("labels"), selector)
                    ]
                if field.startswith("metadata.name="):
                    items = [i for i in items if i["metadata"]["name"] == field.split("=", 1)[1]]
                if query.get("watch") in ("true", "1"):
                    return self._watch(
                        api_version,
                        kind,
                        namespace,
                        field.split("=", 1)[1] if field else None,
                        float(query.get("timeoutSeconds", "5")),
                    )
                return self._send(
                    200, {"kind": f"{kind}List", "apiVersion": api_version, "items": items}
                )

            def _watch(self, api_version, kind, namespace, name, timeout) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                last: dict = {}
                end = time.monotonic() + timeout
                while time.monotonic() < end:
                    with sim.lock:
                        sim._reconcile()
                        current = {
                            k: sim._view(k)
                            for k in sim.objects
                            if k[:2] == (api_version, kind)
                            and (not namespace or k[2] == namespace)
                            and (name is None or k[3] == name)
                        }
                    events = [
                        ("ADDED" if k not in last else "MODIFIED", o)
                        for k, o in current.items()
                        if last.get(k) != o
                    ]
                    events += [("DELETED", o) for k, o in last.items() if k not in current]
                    for kind_, obj in events:
                        line = json.dumps({"type": kind_, "object": obj}).encode() + b"\n"
                        try:
                            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                            self.wfile.flush()
                        except (BrokenPipeError, ConnectionResetError):
                            return
                    last = current
                    time.sleep(0.02)
                self.wfile.write(b"0\r\n\r\n")

            def do_PATCH(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                body = json.loads(raw or b"{}")
                self._record(body)
                route = self._route()
                if route is None or route[3] is None or not route[4]:
                    return self._status(404, "NotFound", "no such resource")
                api_version, namespace, _, kind, name, query = route
                if self._forbidden("patch", route):
                    return None
                if query["_subresource"] == "status":
                    return self._patch_status((api_version, kind, namespace, name), body)
                if query["_subresource"] == "scale":
                    return self._scale((api_version, kind, namespace, name), body)
                if self.headers.get("Content-Type") == "application/merge-patch+json":
                    return self._merge_patch((api_version, kind, namespace, name), body)
                if self.headers.get("Content-Type") != "application/apply-patch+yaml":
                    return self._status(
                        415, "UnsupportedMediaType", "only server-side apply is served"
                    )
                if not query.get("fieldManager"):
                    return self._status(
                        400, "BadRequest", "fieldManager is required for apply requests"
                    )
                if body.get("kind") != kind or body.get("metadata", {}).get("name") != name:
                    return self._status(400, "BadRequest", "body does not match the URL")
                key = (api_version, kind, namespace, name)
                # An apply that would create the object needs `create` too, as kube-apiserver asks.
                if key not in sim.objects and self._forbidden("create", route):
                    return None
                if self._forbidden_grant(route, body):
                    return None
                with sim.lock:
                    if key in sim.deleted_at:
                        return self._status(409, "Conflict", "object is being deleted")
                    old = sim.objects.get(key)
                    # A resourceVersion in the body is a precondition, as the API server reads it.
                    expected = (body.get("metadata") or {}).get("resourceVersion")
                    if expected not in (None, "") and (
                        old is None or old["metadata"]["resourceVersion"] != str(expected)
                    ):
                        return self._status(
                            409,
                            "Conflict",
                            "the object has been modified; please apply your changes to the "
                            "latest version and try again",
                        )
                    spec = {k: v for k, v in body.items() if k not in ("metadata", "status")}
                    meta = copy.deepcopy(body["metadata"])
                    if old is None:
                        meta.update(
                            {
                                "uid": str(uuid.uuid4()),
                                "generation": 1,
                                "resourceVersion": "1",
                                "creationTimestamp": time.strftime(
                                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime()
                                ),
                            }
                        )
                        sim.applied_at[key] = time.monotonic()
                    else:
                        old_spec = {k: v for k, v in old.items() if k not in ("metadata", "status")}
                        changed = old_spec != spec
                        meta.update(
                            {
                                "uid": old["metadata"]["uid"],
                                "creationTimestamp": old["metadata"].get("creationTimestamp"),
                                "generation": old["metadata"]["generation"] + (1 if changed else 0),
                                "resourceVersion": str(int(old["metadata"]["resourceVersion"]) + 1),
                            }
                        )
                        if changed:
                            sim.applied_at[key] = time.monotonic()
                    meta["managedFields"] = [
                        {
                            "manager": query["fieldManager"],
                            "operation": "Apply",
                            "apiVersion": api_version,
                            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            "fieldsType": "FieldsV1",
                        }
                    ]
                    if namespace:
                        meta["namespace"] = namespace
                    sim.objects[key] = {**spec, "metadata": meta}
                    sim._kamaji(key)
                    sim._reconcile()
                    view = sim._view(key)
                self._send(200 if old else 201, view)
                sim._written("patch", key, 200, self.headers.get("User-Agent", ""))

            def _merge_patch(self, key, body) -> None:
                """A JSON merge patch (RFC 7386) of an object's metadata labels and annotations,
                the part of an object a controller marks without owning it (a Node's
                annotations); resourceVersion moves on, as on any write."""
                allowed = {"labels", "annotations"}
                meta_patch = body.get("metadata") or {}
                if set(body) - {"metadata"} or set(meta_patch) - allowed:
                    return self._status(
                        422, "Invalid", "only metadata.labels and metadata.annotations are patched"
                    )
                with sim.lock:
                    if key not in sim.objects:
                        return self._status(404, "NotFound", f"{key[3]} not found")
                    meta = sim.objects[key]["metadata"]
                    for field, changes in meta_patch.items():
                        merged = dict(meta.get(field) or {})
                        for name, value in (changes or {}).items():
                            if value is None:
                                merged.pop(name, None)
                            else:
                                merged[name] = str(value)
                        meta[field] = merged
                    meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
                    sim._reconcile()
                    view = sim._view(key)
                self._send(200, view)
                sim._written("patch", key, 200, self.headers.get("User-Agent", ""))

            def _scale(self, key, body: dict | None) -> None:
                """The `scale` subresource of a Deployment or StatefulSet (autoscaling/v1 Scale):
                read it, or merge-patch its `spec.replicas`, which moves the workload's
                generation and makes it roll (not Ready until `ready_after` has passed)."""
                if key[:2] not in (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")):
                    return self._status(404, "NotFound", f"{key[1]} has no scale subresource")
                if body is not None and (
                    self.headers.get("Content-Type") != "application/merge-patch+json"
                    or set(body) - {"spec"}
                    or set(body.get("spec") or {}) - {"replicas"}
                    or not isinstance((body.get("spec") or {}).get("replicas"), int)
                ):
                    return self._status(422, "Invalid", "a scale patch sets spec.replicas only")
                with sim.lock:
                    if key not in sim.objects:
                        return self._status(404, "NotFound", f"{key[3]} not found")
                    obj = sim.objects[key]
                    meta = obj["metadata"]
                    if body is not None:
                        replicas = body["spec"]["replicas"]
                        if obj.setdefault("spec", {}).get("replicas", 1) != replicas:
                            obj["spec"]["replicas"] = replicas
                            meta["generation"] = meta["generation"] + 1
                            sim.applied_at[key] = time.monotonic()
                        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
                        sim._reconcile()
                    scale = {
                        "kind": "Scale",
                        "apiVersion": "autoscaling/v1",
                        "metadata": {
                            "name": key[3],
                            "namespace": key[2],
                            "resourceVersion": meta["resourceVersion"],
                        },
                        "spec": {"replicas": obj.get("spec", {}).get("replicas", 1)},
                        "status": {"replicas": obj.get("spec", {}).get("replicas", 1)},
                    }
                self._send(200, scale)
                if body is not None:
                    sim._written("update", key, 200, self.headers.get("User-Agent", ""))

            def _patch_status(self, key, body) -> None:
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    return self._status(415, "UnsupportedMediaType", "status takes a merge patch")
                with sim.lock:
                    if key not in sim.objects:
                        return self._status(404, "NotFound", f"{key[3]} not found")
                    sim.status[key] = {**sim.status.get(key, {}), **body.get("status", {})}
                    sim._reconcile()
                    view = sim._view(key)
                self._send(200, view)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                self._record(body)
                route = self._route()
                if route is not None and route[3] == "Lease" and not route[4]:
                    return self._create(route, body)
                if route is None or route[3] != "Pod" or route[5]["_subresource"] != "binding":
                    return self._status(405, "MethodNotAllowed", "only pod bindings are posted")
                if self._forbidden("create", route):
                    return None
                api_version, namespace, _, kind, name, _ = route
                key = (api_version, kind, namespace, name)
                with sim.lock:
                    pod = sim.objects.get(key)
                    if pod is None:
                        return self._status(404, "NotFound", f"pods {name} not found")
                    if pod.get("spec", {}).get("nodeName"):
                        return self._status(409, "Conflict", f"pod {name} is already assigned")
                    pod.setdefault("spec", {})["nodeName"] = body["target"]["name"]
                    annotations = pod["metadata"].setdefault("annotations", {})
                    annotations.update((body.get("metadata") or {}).get("annotations") or {})
                    sim.status[key] = {"phase": "Running"}
                    sim._reconcile()
                self._send(201, {"kind": "Status", "status": "Success", "code": 201})

            def _create(self, route, body: dict) -> None:
                """POST of a new Lease (409 AlreadyExists if there is one)."""
                if self._forbidden("create", route):
                    return None
                api_version, namespace, _, kind, _, _ = route
                name = (body.get("metadata") or {}).get("name", "")
                key = (api_version, kind, namespace, name)
                with sim.lock:
                    if key in sim.objects:
                        return self._status(409, "AlreadyExists", f"{name} already exists")
                    meta = {**body["metadata"], "namespace": namespace, "uid": str(uuid.uuid4()),
                            "generation": 1, "resourceVersion": "1"}  # fmt: skip
                    sim.objects[key] = {**body, "metadata": meta}
                    sim.applied_at[key] = time.monotonic()
                    view = sim._view(key)
                self._send(201, view)

            def do_PUT(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                self._record(body)
                route = self._route()
                if route is None or route[3] != "Lease" or not route[4]:
                    return self._status(405, "MethodNotAllowed", "only Leases are replaced")
                if self._forbidden("update", route):
                    return None
                api_version, namespace, _, kind, name, _ = route
                key = (api_version, kind, namespace, name)
                with sim.lock:
                    old = sim.objects.get(key)
                    if old is None:
                        return self._status(404, "NotFound", f"leases {name} not found")
                    expected = (body.get("metadata") or {}).get("resourceVersion")
                    if str(expected) != old["metadata"]["resourceVersion"]:
                        return self._status(409, "Conflict", "the object has been modified")
                    meta = {**body["metadata"], "namespace": namespace,
                            "uid": old["metadata"]["uid"], "generation": 1,
                            "resourceVersion": str(int(old["metadata"]["resourceVersion"]) + 1)}  # fmt: skip
                    sim.objects[key] = {**body, "metadata": meta}
                    view = sim._view(key)
                self._send(200, view)

            def do_DELETE(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                self._record(json.loads(self.rfile.read(length) or b"{}"))
                route = self._route()
                if route is None or route[3] is None or not route[4]:
                    return self._status(404, "NotFound", "no such resource")
                if self._forbidden("delete", route):
                    return None
                api_version, namespace, _, kind, name, _ = route
                key = (api_version, kind, namespace, name)
                agent = self.headers.get("User-Agent", "")
                with sim.lock:
                    sim._reconcile()
                    if key not in sim.objects:
                        self._status(404, "NotFound", f"{name} not found")
                        return sim._written("delete", key, 404, agent)
                    sim.deleted_at.setdefault(key, time.monotonic())
                    sim.objects[key]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                    sim._reconcile()
                    gone = key not in sim.objects
                    if not gone and not sim.objects[key]["metadata"].get("finalizers"):
                        # What holds a deleting object is a finalizer: the API server shows it.
                        sim.objects[key]["metadata"]["finalizers"] = [HELD_FINALIZER]
                self._send(200, {"kind": "Status", "status": "Success"} if gone else sim._view(key))
                sim._written("delete", key, 200, agent)

        return Handler
