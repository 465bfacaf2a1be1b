"""Kubernetes delivery: server-side apply (field manager `kiln`) through the official `kubernetes` client.

Resources are found by API discovery (`/api/v1`, `/apis/<group>/<version>`), as
kubectl does, so any kind the cluster serves works (CRDs included). Apply is a
PATCH with `application/apply-patch+yaml`, `fieldManager=kiln` and
`force=true` (Kiln owns these fields). Readiness is awaited with a watch
(`wait_ready`); `health` reads the object once.

A manifest carrying `metadata.resourceVersion` is a conditional write: the API
server answers 409 when the object moved on, raised here as `Conflict`. Label
selectors go to the server; `include_deleting` and `routing_host` are applied to
the listed objects (the API server cannot select on spec fields).

Past ~400 lines because it is one backend: each method of the `DeliveryBackend` protocol
(kiln/cluster/base.py) against the real client, beside the client setup and rate limit they
share; splitting it would split one implementation of one contract.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import yaml
from django.conf import settings
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from kiln.cluster.base import (
    USER_AGENT,
    AppliedRef,
    Conflict,
    DeliveryError,
    Health,
    HealthStatus,
    LeaseMirror,
    PodBinding,
    health_of,
    is_deleting,
    may_route_host,
    ref_of,
    secret_manifest,
    secret_text,
)
from kiln.cluster.lease import KubernetesLease
from kiln.cluster.ratelimit import RateLimit
from kiln.cluster.tree import ObjectState, state_of

__all__ = ["KubernetesBackend", "RateLimit"]

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
RETRYABLE = {408, 409, 429, 500, 502, 503, 504}
# Where Kamaji keeps a TenantControlPlane's admin kubeconfig when its status does not say.
ADMIN_KUBECONFIG_SECRET = "{name}-admin-kubeconfig"  # noqa: S105 - a Secret's name
ADMIN_KUBECONFIG_KEY = "admin.conf"
TCP = ("kamaji.clastix.io/v1alpha1", "TenantControlPlane")


# One backend per process and configuration, as client-go keeps one client: the token bucket
# and the connection pool are the process's. Built per call (as get_backend is called), each
# would start with a full burst and connections of its own, and KILN_KUBE_QPS would limit
# nothing. The pid is in the key: a forked child (a prefork worker) builds its own.
_PER_PROCESS: dict[tuple, KubernetesBackend] = {}
_PER_PROCESS_LOCK = threading.Lock()


class KubernetesBackend:
    """Delivery backend over a real API server (see module docstring)."""

    name = "kubernetes"
    syncs_gitops = True  # Argo CD runs in the cluster and syncs the repository itself
    simulates_traffic = False  # real traffic: its effect is measured, not derived
    simulates_scheduling = False  # the cluster's own kube-scheduler and Karpenter run

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        timeout: float = 30.0,
        rate_limit: RateLimit | None = None,
    ) -> None:
        self.api = api_client
        self.api.user_agent = USER_AGENT
        # Which process of Kiln's is asking (the promote bench counts each one's requests
        # against its token bucket); API servers ignore a header they do not know.
        self.api.set_default_header("Kiln-Process", str(os.getpid()))
        self.timeout = timeout
        self.rate_limit = rate_limit or RateLimit(0, 1)
        self._discovery: dict[str, dict[str, tuple[str, bool]]] = {}

    @classmethod
    def from_settings(cls) -> KubernetesBackend:
        """The process's backend for the current settings (see `_PER_PROCESS`)."""
        key = (
            os.getpid(), getattr(settings, "KILN_KUBE_API_URL", None),
            getattr(settings, "KILN_KUBE_TOKEN_FILE", None),
            getattr(settings, "KILN_KUBE_CA_FILE", None), os.environ.get("KUBECONFIG"),
            settings.KILN_KUBE_QPS, settings.KILN_KUBE_BURST, settings.KILN_KUBE_POOL_SIZE,
        )  # fmt: skip
        with _PER_PROCESS_LOCK:
            if key not in _PER_PROCESS:
                _PER_PROCESS.clear()  # settings changed (tests) or a forked child: start over
                _PER_PROCESS[key] = cls._configured()
            return _PER_PROCESS[key]

    @classmethod
    def _configured(cls) -> KubernetesBackend:
        """KILN_KUBE_API_URL (+ token and CA files) if set, else in-cluster, else kubeconfig;
        with the client limits KILN_KUBE_QPS, KILN_KUBE_BURST and KILN_KUBE_POOL_SIZE."""
        limit = RateLimit(settings.KILN_KUBE_QPS, settings.KILN_KUBE_BURST)
        url = getattr(settings, "KILN_KUBE_API_URL", None)
        if url:
            configuration = k8s.Configuration(host=url)
            configuration.connection_pool_maxsize = settings.KILN_KUBE_POOL_SIZE
            token_file = getattr(settings, "KILN_KUBE_TOKEN_FILE", None)
            if token_file:
                with open(token_file) as fh:
                    configuration.api_key = {"BearerToken": fh.read().strip()}
                    configuration.api_key_prefix = {"BearerToken": "Bearer"}
            ca_file = getattr(settings, "KILN_KUBE_CA_FILE", None)
            if ca_file:
                configuration.ssl_ca_cert = ca_file
            return cls(k8s.ApiClient(configuration), rate_limit=limit)
        try:
            k8s_config.load_incluster_config()
        except k8s_config.ConfigException:
            # The client reads KUBECONFIG once, at import; pass it now so the current value counts.
            k8s_config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
        configuration = k8s.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = settings.KILN_KUBE_POOL_SIZE
        return cls(k8s.ApiClient(configuration), rate_limit=limit)

    # --- HTTP ---------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        stream: bool = False,
        timeout: float | None = None,
    ):
        self.rate_limit.wait()
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            method, url, headers, body, post = self.api.param_serialize(
                method,
                path,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                post_params=post,
                _request_timeout=timeout or self.timeout,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(f"{method} {path}: {exc.reason}") from exc
            raise DeliveryError(
                f"{method} {path}: {exc.status} {exc.reason}", retryable=exc.status in RETRYABLE
            ) from exc
        except Exception as exc:  # noqa: BLE001 - connection errors: the API server may come back
            raise DeliveryError(f"{method} {path}: {exc}", retryable=True) from exc
        if stream:
            return response
        response.read()
        return response

    def _json(self, response) -> Any:
        return json.loads(response.data or b"{}")

    def _check(self, response, what: str, allow: tuple[int, ...] = ()) -> None:
        if response.status >= 400 and response.status not in allow:
            try:
                message = self._json(response).get("message", "")
            except ValueError:
                message = ""
            if response.status == 409:
                raise Conflict(f"{what}: HTTP 409 {message}".strip())
            raise DeliveryError(
                f"{what}: HTTP {response.status} {message}".strip(),
                retryable=response.status in RETRYABLE,
                extra={"status": response.status},
            )

    # --- discovery ----------------------------------------------------------------

    def _resource(self, api_version: str, kind: str, refreshed: bool = False) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from the API server's discovery document (cached for
        the backend's life, read again once for a kind it does not list)."""
        if api_version not in self._discovery:
            refreshed = True
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            response = self._request("GET", path)
            if response.status == 404:
                raise DeliveryError(f"the API server does not serve {api_version}", retryable=False)
            self._check(response, f"discovery of {api_version}")
            self._discovery[api_version] = {
                r["kind"]: (r["name"], bool(r.get("namespaced")))
                for r in self._json(response).get("resources", [])
                if "/" not in r["name"]
            }
        found = self._discovery[api_version].get(kind)
        if found is None and not refreshed:  # a kind installed since (a CRD): discover again
            self._discovery.pop(api_version, None)
            return self._resource(api_version, kind, refreshed=True)
        if found is None:
            raise DeliveryError(
                f"the API server does not serve {kind} in {api_version}", retryable=False
            )
        return found

    def _path(
        self, api_version: str, kind: str, namespace: str | None, name: str | None = None
    ) -> str:
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{plural}"
        return f"{base}/{name}" if name else base

    # --- interface ----------------------------------------------------------------

    def apply(self, manifests: list[dict], *, field_manager: str = "kiln") -> list[AppliedRef]:
        """Server-side apply each manifest in order (force: Kiln owns the fields it sets)."""
        refs = [ref_of(m) for m in manifests]
        out = []
        for ref, manifest in zip(refs, manifests, strict=True):
            body = {k: v for k, v in manifest.items() if k != "status"}
            response = self._request(
                "PATCH",
                self._path(ref.api_version, ref.kind, ref.namespace, ref.name),
                query=[("fieldManager", field_manager), ("force", "true")],
                body=body,
                content_type=APPLY_CONTENT_TYPE,
            )
            self._check(response, f"apply {ref}")
            live = self._json(response)
            meta = live.get("metadata", {})
            out.append(
                AppliedRef(
                    *ref.key, generation=int(meta.get("generation") or 0), uid=meta.get("uid", "")
                )
            )
        return out

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        """The live object, or None on 404."""
        response = self._request("GET", self._path(api_version, kind, namespace, name))
        if response.status == 404:
            return None
        self._check(response, f"get {kind} {name}")
        return self._json(response)

    def delete(self, ref: AppliedRef) -> bool:
        """Foreground deletion; False if it was already gone."""
        response = self._request(
            "DELETE",
            self._path(ref.api_version, ref.kind, ref.namespace, ref.name),
            body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"},
            content_type="application/json",
        )
        if response.status == 404:
            return False
        self._check(response, f"delete {ref}")
        return True

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        *,
        include_deleting: bool = True,
        routing_host: str | None = None,
    ) -> list[dict]:
        """Objects of one kind (optionally one namespace, a label selector, live ones, a routed host)."""
        query = [("labelSelector", label_selector)] if label_selector else []
        try:
            path = self._path(api_version, kind, namespace)
        except DeliveryError as exc:
            if not exc.retryable:
                return []  # the cluster does not serve this kind: there is none of it
            raise
        response = self._request("GET", path, query=query)
        self._check(response, f"list {kind}")
        items = self._json(response).get("items", [])
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        items = [
            o
            for o in items
            if (include_deleting or not is_deleting(o))
            and (routing_host is None or may_route_host(o, routing_host))
        ]
        return sorted(
            items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        )

    def list_kinds(self, kinds: Sequence[tuple[str, str]], namespace: str) -> list[dict]:
        """One list request per kind: the API server lists one resource at a time."""
        return [o for api_version, kind in kinds for o in self.list(api_version, kind, namespace)]

    def health(self, ref: AppliedRef) -> Health:
        """Health from the live object's conditions."""
        return health_of(self.get(*ref.key))

    def health_many(self, refs: list[AppliedRef]) -> list[Health]:
        """Health of each object, one read each."""
        return [self.health(ref) for ref in refs]

    def describe(self, refs: list[AppliedRef]) -> list[ObjectState]:
        """Each object as the API server serves it, one read each (`kiln.cluster.tree`)."""
        return [state_of(ref, self.get(*ref.key)) for ref in refs]

    def lock_namespace(self, *, namespace: str) -> AbstractContextManager[None]:
        """Nothing to hold: the API server's resourceVersion preconditions decide every write."""
        return nullcontext()

    def carry_out_pod_kill(self, *, namespace: str, pods: list[str]) -> list[str]:
        """Nothing: Chaos Mesh in the cluster kills the pods of the applied PodChaos."""
        return []

    def lease_mirror(self, *, namespace: str, name: str) -> LeaseMirror | None:
        """A coordination.k8s.io/v1 Lease on this API server, with this backend's credentials."""
        return KubernetesLease(self.api, namespace, name)

    def update_status(self, updates: list[tuple[AppliedRef, dict[str, Any]]]) -> int:
        """A merge patch of each object's status subresource; a missing object is skipped."""
        written = 0
        for ref, status in updates:
            path = self._path(ref.api_version, ref.kind, ref.namespace, ref.name) + "/status"
            response = self._request(
                "PATCH", path, body={"status": status}, content_type="application/merge-patch+json"
            )
            if response.status == 404:
                continue
            self._check(response, f"status of {ref}")
            written += 1
        return written

    def bind_pods(self, bindings: list[PodBinding]) -> int:
        """POST a v1 Binding per pod; a pod that is gone (404) or already bound (409) is skipped."""
        bound = 0
        for binding in bindings:
            path = self._path("v1", "Pod", binding.namespace, binding.name) + "/binding"
            response = self._request("POST", path, body=binding.manifest())
            if response.status in (404, 409):
                continue
            self._check(response, f"binding of pod {binding.namespace}/{binding.name}")
            bound += 1
        return bound

    def annotate(self, ref: AppliedRef, annotations: dict[str, str | None]) -> bool:
        """A JSON merge patch of the object's `metadata.annotations` (null removes); False on 404."""
        response = self._request(
            "PATCH",
            self._path(ref.api_version, ref.kind, ref.namespace, ref.name),
            body={"metadata": {"annotations": dict(annotations)}},
            content_type="application/merge-patch+json",
        )
        if response.status == 404:
            return False
        self._check(response, f"annotations of {ref}")
        return True

    def scale(self, ref: AppliedRef, replicas: int) -> int | None:
        """Read the workload's `scale` subresource, then a merge patch of its `spec.replicas`;
        None on 404."""
        path = self._path(ref.api_version, ref.kind, ref.namespace, ref.name) + "/scale"
        response = self._request("GET", path)
        if response.status == 404:
            return None
        self._check(response, f"scale of {ref}")
        before = int((self._json(response).get("spec") or {}).get("replicas") or 0)
        if before != replicas:
            response = self._request(
                "PATCH",
                path,
                body={"spec": {"replicas": int(replicas)}},
                content_type="application/merge-patch+json",
            )
            if response.status == 404:
                return None
            self._check(response, f"scale of {ref}")
        return before

    def write_secret(
        self, *, namespace: str, name: str, data: dict[str, str], labels: dict[str, str]
    ) -> AppliedRef:
        """Server-side apply of the Secret to this API server."""
        manifest = secret_manifest(namespace=namespace, name=name, data=data, labels=labels)
        return self.apply([manifest])[0]

    def tenant(self, *, namespace: str, name: str) -> KubernetesBackend | None:
        """A backend on the tenant API server, with the admin kubeconfig Kamaji writes for the
        TenantControlPlane (the Secret its status names, else `<name>-admin-kubeconfig`, key
        `admin.conf`); None while the control plane or that Secret is not there yet."""
        tcp = self.get(*TCP, namespace, name)
        if tcp is None:
            return None
        admin = ((tcp.get("status") or {}).get("kubeconfig") or {}).get("admin") or {}
        secret_name = admin.get("secretName") or ADMIN_KUBECONFIG_SECRET.format(name=name)
        text = secret_text(self.get("v1", "Secret", namespace, secret_name), ADMIN_KUBECONFIG_KEY)
        if not text:
            return None
        try:
            kubeconfig = yaml.safe_load(text)
            configuration = k8s.Configuration()
            k8s_config.load_kube_config_from_dict(
                kubeconfig, client_configuration=configuration, persist_config=False
            )
        except (yaml.YAMLError, k8s_config.ConfigException, TypeError, AttributeError) as exc:
            raise DeliveryError(
                f"the admin kubeconfig of {namespace}/{name} does not load: {exc}", retryable=False
            ) from exc
        configuration.connection_pool_maxsize = self.api.configuration.connection_pool_maxsize
        return KubernetesBackend(
            k8s.ApiClient(configuration), timeout=self.timeout, rate_limit=self.rate_limit
        )

    def wait_ready(self, ref: AppliedRef, timeout: float = 60.0) -> Health:
        """Watch one object until it is healthy, degraded or `timeout` passes."""
        deadline = time.monotonic() + timeout
        health = self.health(ref)
        while (
            health.status not in (HealthStatus.HEALTHY, HealthStatus.DEGRADED)
            and time.monotonic() < deadline
        ):
            remaining = max(1, int(deadline - time.monotonic()))
            response = self._request(
                "GET",
                self._path(ref.api_version, ref.kind, ref.namespace),
                query=[
                    ("watch", "true"),
                    ("fieldSelector", f"metadata.name={ref.name}"),
                    ("timeoutSeconds", str(remaining)),
                ],
                stream=True,
                timeout=remaining + 5,
            )
            if response.status >= 400:
                response.read()
                self._check(response, f"watch {ref}")
            buffer = b""
            for chunk in response.response.stream(4096):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    health = health_of(
                        None if event.get("type") == "DELETED" else event.get("object")
                    )
                    if health.status in (HealthStatus.HEALTHY, HealthStatus.DEGRADED):
                        response.response.release_conn()
                        return health
        return health
