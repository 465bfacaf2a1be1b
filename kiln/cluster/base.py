"""The cluster interface's types, errors and pure helpers (the protocol is `kiln.cluster.protocol`).

Nothing here touches Django's models or a cluster: references, health, label
selectors, the resourceVersion precondition and host matching are plain
functions, so every backend (and every caller) shares one reading of them.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kiln.errors import InvalidInput, KilnError

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# What Kiln's requests say they are (the User-Agent header, and `userAgent` in the audit events
# an API server writes for them), so a tenant's audit trail tells Kiln's requests from its own.
USER_AGENT = "kiln"


class DeliveryError(KilnError):
    """A backend could not do what was asked; `retryable` says whether trying again may help."""

    code = "delivery_failed"
    http_status = 503

    def __init__(self, message: str, *, retryable: bool = True, extra: dict | None = None) -> None:
        super().__init__(message, extra=extra)
        self.retryable = retryable


class Conflict(DeliveryError):
    """A write's `metadata.resourceVersion` precondition failed: the object changed or went (HTTP 409).

    Every backend raises this one type for a stale precondition, so a caller's
    read-modify-write retries the same way whichever cluster is behind it.
    """

    code = "cluster_conflict"
    http_status = 409

    def __init__(self, message: str, *, extra: dict | None = None) -> None:
        super().__init__(message, retryable=True, extra={"status": 409, **(extra or {})})


class LeaseConflict(Exception):
    """A cluster-side Lease changed under its writer (409) or is held by someone else."""


class InvalidManifest(InvalidInput):
    """A manifest lacks apiVersion, kind or a valid metadata.name."""

    code = "invalid_manifest"


class HealthStatus(StrEnum):
    """Health of one object, Argo CD style."""

    HEALTHY = "Healthy"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    DELETING = "Deleting"
    MISSING = "Missing"


@dataclass(frozen=True)
class Health:
    """An object's health and the reason for it."""

    status: HealthStatus
    message: str = ""

    @property
    def ready(self) -> bool:
        return self.status == HealthStatus.HEALTHY


@dataclass(frozen=True)
class AppliedRef:
    """Identity of one applied object; `namespace` is "" for cluster-scoped kinds."""

    api_version: str
    kind: str
    namespace: str
    name: str
    generation: int = 0
    uid: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.api_version, self.kind, self.namespace, self.name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AppliedRef:
        return cls(data["apiVersion"], data["kind"], data.get("namespace") or "", data["name"])

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.api_version} {self.kind} {where}{self.name}"


@dataclass(frozen=True)
class PodBinding:
    """A pod bound to a node, as a `v1 Binding` says it; its annotations are copied onto the pod."""

    namespace: str
    name: str
    node: str
    annotations: dict[str, str] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        """The `v1 Binding` object kube-scheduler posts to `pods/<name>/binding`."""
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "annotations": dict(self.annotations),
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node},
        }


def secret_manifest(
    *, namespace: str, name: str, data: dict[str, str], labels: dict[str, str]
) -> dict[str, Any]:
    """A v1 Opaque Secret holding `data` (text values, stored base64 as the API server keeps them)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())},
    }


def secret_text(secret: dict[str, Any] | None, key: str) -> str | None:
    """One value of a live Secret as text (`data` is base64, `stringData` plain), or None."""
    if not secret:
        return None
    if key in (secret.get("stringData") or {}):
        return str(secret["stringData"][key])
    raw = (secret.get("data") or {}).get(key)
    if raw is None:
        return None
    try:
        return base64.b64decode(raw).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def precondition_of(manifest: dict[str, Any]) -> str | None:
    """The resourceVersion a manifest expects the live object to have, or None (unconditional)."""
    version = (manifest.get("metadata") or {}).get("resourceVersion")
    return str(version) if version not in (None, "") else None


def host_label(host: str) -> str:
    """The first DNS label of a host, lower-cased: every spelling of one host starts with it."""
    return host.strip().lower().split(".", 1)[0]


def may_route_host(obj: dict[str, Any], host: str) -> bool:
    """True if one of `spec.hosts` starts with `host`'s first label (short, FQDN or `.svc` forms).

    A superset of exact routing, shared by every backend's `routing_host` filter so all
    three return the same objects; the caller then resolves hosts exactly.
    """
    label = host_label(host)
    for entry in (obj.get("spec") or {}).get("hosts") or []:
        if not isinstance(entry, str):
            continue
        text = entry.strip().lower()
        if text == label or text.startswith(label + "."):
            return True
    return False


def is_deleting(obj: dict[str, Any]) -> bool:
    """True once an object has a deletionTimestamp."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def health_of(obj: dict | None) -> Health:
    """Health of a live object from its metadata and Ready condition."""
    if obj is None:
        return Health(HealthStatus.MISSING, "not found")
    if obj.get("metadata", {}).get("deletionTimestamp"):
        finalizers = obj["metadata"].get("finalizers") or []
        return Health(HealthStatus.DELETING, f"waiting for finalizers {finalizers}")
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Ready", "Available", "Healthy"):
            if condition.get("status") == "True":
                return Health(HealthStatus.HEALTHY, condition.get("message", ""))
            if condition.get("reason") in ("SimulatedFailure", "Failed", "Error"):
                return Health(HealthStatus.DEGRADED, condition.get("message", ""))
            return Health(HealthStatus.PROGRESSING, condition.get("message", ""))
    return Health(HealthStatus.HEALTHY, "no readiness conditions")


def ref_of(manifest: dict[str, Any]) -> AppliedRef:
    """The reference of a manifest; raises InvalidManifest when it lacks identity fields."""
    if not isinstance(manifest, dict):
        raise InvalidManifest("a manifest must be a mapping")
    api_version = manifest.get("apiVersion")
    kind = manifest.get("kind")
    metadata = manifest.get("metadata")
    if not isinstance(api_version, str) or not api_version:
        raise InvalidManifest("manifest has no apiVersion")
    if not isinstance(kind, str) or not kind:
        raise InvalidManifest("manifest has no kind")
    if not isinstance(metadata, dict):
        raise InvalidManifest(f"{kind} has no metadata")
    name = metadata.get("name")
    namespace = metadata.get("namespace") or ""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidManifest(f"{kind} has no valid metadata.name: {name!r}")
    if not isinstance(namespace, str) or (namespace and not NAME_RE.match(namespace)):
        raise InvalidManifest(f"{kind} {name} has an invalid metadata.namespace: {namespace!r}")
    return AppliedRef(api_version, kind, namespace, name)


def parse_label_selector(selector: str | None) -> list[tuple[str, str, str | None]]:
    """Parse an equality-based selector into (key, op, value) with op in =, !=, exists, !exists."""
    terms: list[tuple[str, str, str | None]] = []
    for raw in (selector or "").split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append((key.strip(), "!=", value.strip()))
        elif "==" in term:
            key, value = term.split("==", 1)
            terms.append((key.strip(), "=", value.strip()))
        elif "=" in term:
            key, value = term.split("=", 1)
            terms.append((key.strip(), "=", value.strip()))
        elif term.startswith("!"):
            terms.append((term[1:].strip(), "!exists", None))
        else:
            terms.append((term, "exists", None))
    for key, _, _ in terms:
        if not key:
            raise InvalidInput(f"label selector {selector!r} has an empty key")
    return terms


def match_labels(labels: dict[str, str] | None, selector: str | None) -> bool:
    """True if `labels` satisfy the equality-based `selector`."""
    labels = labels or {}
    for key, op, value in parse_label_selector(selector):
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
    return True


def desired_state(manifest: dict[str, Any]) -> dict[str, Any]:
    """The fields an apply owns: everything but status and server-set metadata."""
    body = {k: v for k, v in manifest.items() if k != "status"}
    metadata = dict(body.get("metadata") or {})
    for server_field in (
        "uid",
        "generation",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "managedFields",
    ):
        metadata.pop(server_field, None)
    body["metadata"] = metadata
    return body
