"""A `coordination.k8s.io/v1` Lease beside a database lease, through the official `kubernetes` client.

The kubernetes backend hands one out (`KubernetesBackend.lease_mirror`) so that
a chaos lease also holds in the cluster: every write carries the Lease's
resourceVersion (optimistic concurrency), and a 409 or another holder is a
`LeaseConflict`. Any other refusal (a 403 when the ServiceAccount may not write Leases in
the namespace) is a `DeliveryError` carrying the API server's message.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kiln.cluster.base import DeliveryError, LeaseConflict
from kiln.cluster.protocol import LeaseMirror, LeaseTerms

LABEL_MANAGED = "app.kubernetes.io/managed-by"
RETRYABLE = {408, 429, 500, 502, 503, 504}


def _refused(what: str, exc: ApiException) -> DeliveryError:
    """The API server's refusal as a DeliveryError with its own message (verb, resource, user)."""
    try:
        message = json.loads(exc.body or "{}").get("message", "") or exc.reason
    except (ValueError, AttributeError):
        message = exc.reason
    return DeliveryError(
        f"{what}: HTTP {exc.status} {message}".strip(),
        retryable=exc.status in RETRYABLE,
        extra={"status": exc.status},
    )


def _micro_time(value: datetime) -> str:
    """Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubernetesLease(LeaseMirror):
    """A `coordination.k8s.io/v1` Lease written with optimistic concurrency (resourceVersion)."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str) -> None:
        self.api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name

    def read(self) -> Any | None:
        """The live Lease or None."""
        try:
            return self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _refused(f"read Lease {self.namespace}/{self.name}", exc) from exc

    def replace(self, terms: LeaseTerms, *, expected_holder: str | None) -> str:
        """Create or replace the Lease if it still names `expected_holder`; returns the new resourceVersion."""
        holder = terms.holder
        spec = client.V1LeaseSpec(
            holder_identity=holder or None,
            lease_duration_seconds=max(1, math.ceil(terms.lease_duration)),
            acquire_time=_micro_time(terms.acquire_time),
            renew_time=_micro_time(terms.renew_time),
            lease_transitions=terms.transitions,
        )
        current = self.read()
        try:
            if current is None:
                body = client.V1Lease(
                    metadata=client.V1ObjectMeta(
                        name=self.name, namespace=self.namespace, labels={LABEL_MANAGED: "kiln"}
                    ),
                    spec=spec,
                )
                created = self.api.create_namespaced_lease(self.namespace, body)
                return created.metadata.resource_version
            current_holder = (current.spec.holder_identity if current.spec else None) or ""
            if expected_holder is not None and current_holder not in ("", expected_holder, holder):
                raise LeaseConflict(f"Lease {self.name} is held by {current_holder}")
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(
                    name=self.name,
                    namespace=self.namespace,
                    resource_version=current.metadata.resource_version,
                    labels=current.metadata.labels,
                ),
                spec=spec,
            )
            replaced = self.api.replace_namespaced_lease(self.name, self.namespace, body)
            return replaced.metadata.resource_version
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseConflict(f"Lease {self.name} changed concurrently") from exc
            raise _refused(f"write Lease {self.namespace}/{self.name}", exc) from exc

    def holder(self) -> str:
        """Who the Lease names now ("" when there is none or it names no one)."""
        current = self.read()
        if current is None or current.spec is None:
            return ""
        return current.spec.holder_identity or ""

    def delete(self, *, expected_holder: str | None = None) -> None:
        """Remove the Lease (idempotent); with `expected_holder`, only the version read naming
        that holder or no one (a precondition on its resourceVersion: a Lease written since
        is left alone)."""
        body = None
        if expected_holder is not None:
            current = self.read()
            if current is None:
                return
            named = (current.spec.holder_identity if current.spec else None) or ""
            if named not in ("", expected_holder):
                return
            body = client.V1DeleteOptions(
                preconditions=client.V1Preconditions(
                    resource_version=current.metadata.resource_version
                )
            )
        try:
            self.api.delete_namespaced_lease(self.name, self.namespace, body=body)
        except ApiException as exc:
            if exc.status == 409 and body is not None:
                return  # written since it was read: someone else's now
            if exc.status != 404:
                raise _refused(f"delete Lease {self.namespace}/{self.name}", exc) from exc
