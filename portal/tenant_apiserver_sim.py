"""A simulated tenant API server for the simulated cluster: it wraps a delivery backend and, for
every object applied to or deleted from a namespace that has a TenantControlPlane, posts an
`audit.k8s.io/v1` EventList to Kiln's sink (one batch per call, as `--audit-webhook-mode=batch`
flushes), authenticated with the environment's sink token.

kiln.cluster imports no app, so this glue lives in the portal. `post` is either real HTTP
(`http_poster`, what the tenant API server's webhook does) or the sink's service function
(`service_poster`, for a standalone run without a server).
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kiln.cluster import AppliedRef, ref_of
from kiln.errors import KilnError
from portal.compose.spec import L_REQUEST
from portal.services.tenant_audit import tenant_audit_ingest

TCP = ("kamaji.clastix.io/v1alpha1", "TenantControlPlane")
USER = {"username": "system:serviceaccount:kiln:kiln", "groups": ["system:authenticated"]}
Post = Callable[[str, bytes], None]


def http_poster(base_url: str, tokens: Mapping[str, str], *, timeout: float = 5.0) -> Post:
    """POST each batch to `<base_url>/<environment>/` with that environment's bearer token."""

    def post(environment_id: str, body: bytes) -> None:
        if environment_id not in tokens:
            return  # its API server holds no sink token yet: nothing is sent
        req = urllib.request.Request(  # noqa: S310 - the sink URL is the test's own server
            f"{base_url.rstrip('/')}/{environment_id}/",
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {tokens[environment_id]}",
            },
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            resp.read()

    return post


def service_poster(tokens: Mapping[str, str]) -> Post:
    """Hand each batch to the sink's service function, as the HTTP view does."""

    def post(environment_id: str, body: bytes) -> None:
        if environment_id not in tokens:
            return
        tenant_audit_ingest(environment_id=environment_id, token=tokens[environment_id], body=body)

    return post


def audit_event(verb: str, ref: AppliedRef, *, at: datetime | None = None) -> dict[str, Any]:
    """The audit event a tenant API server writes for one completed request on one object."""
    stamp = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    group, _, version = ref.api_version.rpartition("/")
    resource = ref.kind.lower() + "s"
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Event",
        "auditID": str(uuid.uuid4()),
        "stage": "ResponseComplete",
        "level": "Metadata",
        "verb": verb,
        "requestURI": f"/apis/{ref.api_version}/namespaces/{ref.namespace}/{resource}/{ref.name}",
        "user": USER,
        "objectRef": {
            "apiGroup": group,
            "apiVersion": version,
            "resource": resource,
            "namespace": ref.namespace,
            "name": ref.name,
        },
        "responseStatus": {"code": 200},
        "requestReceivedTimestamp": stamp,
        "stageTimestamp": stamp,
    }


class TenantApiServerSim:
    """A delivery backend whose applies and deletes in tenant namespaces are audited to the sink."""

    def __init__(self, backend: Any, post: Post) -> None:
        self._backend, self._post = backend, post
        self.dropped: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def _environment_of(self, namespace: str) -> str | None:
        if not namespace:
            return None
        for tcp in self._backend.list(*TCP, namespace, include_deleting=False):
            labels = tcp.get("metadata", {}).get("labels", {})
            if labels.get(L_REQUEST):
                return labels[L_REQUEST]
        return None

    def _emit(self, verb: str, refs: list[AppliedRef]) -> None:
        batches: dict[str, list[dict]] = {}
        for ref in refs:
            if (ref.api_version, ref.kind) == TCP:
                continue  # the tenant API server does not audit its own control plane object
            environment = self._environment_of(ref.namespace)
            if environment:
                batches.setdefault(environment, []).append(audit_event(verb, ref))
        for environment, items in batches.items():
            body = {"apiVersion": "audit.k8s.io/v1", "kind": "EventList", "items": items}
            try:
                self._post(environment, json.dumps(body).encode())
            except (OSError, KilnError) as exc:
                # A webhook failure never fails the request it audits; the batch is dropped,
                # and teardown's wait for the deletions' events is what notices.
                self.dropped.append((environment, str(exc)))

    def apply(self, manifests: list[dict], **kwargs: Any) -> list[AppliedRef]:
        applied = self._backend.apply(manifests, **kwargs)
        self._emit("patch", [ref_of(m) for m in manifests])
        return applied

    def delete(self, ref: AppliedRef) -> bool:
        environment_known = self._environment_of(ref.namespace)
        deleted = self._backend.delete(ref)
        if environment_known:
            self._emit("delete", [ref])
        return deleted
