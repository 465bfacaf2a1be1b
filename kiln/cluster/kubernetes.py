"""Kubernetes delivery: server-side apply (field manager `kiln`) through the official `kubernetes` client.

Apply is a PATCH with `application/apply-patch+yaml`, `fieldManager=kiln` and `force=true`
(Kiln owns these fields). Readiness is awaited with a watch (`wait_ready`); `health` reads
the object once. Configuration, requests, error mapping and API discovery are the client's
beneath it (`kiln.cluster.kube_client`).

A manifest carrying `metadata.resourceVersion` is a conditional write: the API
server answers 409 when the object moved on, raised here as `Conflict`. Label
selectors go to the server; `include_deleting` and `routing_host` are applied to
the listed objects (the API server cannot select on spec fields).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from kubernetes import client as k8s

from kiln.cluster.base import (
    AppliedRef,
    DeliveryError,
    Health,
    HealthStatus,
    PodBinding,
    health_of,
    ref_of,
    secret_text,
)
from kiln.cluster.kube_client import KubeClient, configuration_from_kubeconfig
from kiln.cluster.lease import KubernetesLease
from kiln.cluster.protocol import DeliveryBackend, LeaseMirror, ListQuery
from kiln.cluster.ratelimit import RateLimit
from kiln.cluster.tree import ObjectState, state_of

__all__ = ["KubernetesBackend", "RateLimit"]

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
# Where Kamaji keeps a TenantControlPlane's admin kubeconfig when its status does not say.
ADMIN_KUBECONFIG_SECRET = "{name}-admin-kubeconfig"  # noqa: S105 - a Secret's name
ADMIN_KUBECONFIG_KEY = "admin.conf"
TCP = ("kamaji.clastix.io/v1alpha1", "TenantControlPlane")


class KubernetesBackend(KubeClient, DeliveryBackend):
    """Delivery backend over a real API server (see module docstring)."""

    name = "kubernetes"
    syncs_gitops = True  # Argo CD runs in the cluster and syncs the repository itself
    simulates_traffic = False  # real traffic: its effect is measured, not derived
    simulates_scheduling = False  # the cluster's own kube-scheduler and Karpenter run

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
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"}
        path = self._path(ref.api_version, ref.kind, ref.namespace, ref.name)
        deleted = self._write("DELETE", path, options, f"delete {ref}", "application/json")
        return deleted is not None

    def list_query(self, query: ListQuery) -> list[dict]:
        """Objects of one kind (optionally one namespace, a label selector, live ones, a routed host)."""
        selector = [("labelSelector", query.label_selector)] if query.label_selector else []
        try:
            path = self._path(query.api_version, query.kind, query.namespace)
        except DeliveryError as exc:
            if not exc.retryable:
                return []  # the cluster does not serve this kind: there is none of it
            raise
        response = self._request("GET", path, query=selector)
        self._check(response, f"list {query.kind}")
        items = self._json(response).get("items", [])
        for item in items:
            item.setdefault("apiVersion", query.api_version)
            item.setdefault("kind", query.kind)
        items = [o for o in items if query.admits(o)]
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
            if self._write("PATCH", path, {"status": status}, f"status of {ref}") is not None:
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
        path = self._path(ref.api_version, ref.kind, ref.namespace, ref.name)
        patch = {"metadata": {"annotations": dict(annotations)}}
        return self._write("PATCH", path, patch, f"annotations of {ref}") is not None

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
            patch = {"spec": {"replicas": int(replicas)}}
            if self._write("PATCH", path, patch, f"scale of {ref}") is None:
                return None
        return before

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
        configuration = configuration_from_kubeconfig(text, where=f"{namespace}/{name}")
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
