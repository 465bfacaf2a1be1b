"""The delivery interface's types: object references, health, errors and label selectors."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from kiln.errors import InvalidInput, KilnError

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class DeliveryError(KilnError):
    """A backend could not do what was asked; `retryable` says whether trying again may help."""

    code = "delivery_failed"
    http_status = 503

    def __init__(self, message: str, *, retryable: bool = True, extra: dict | None = None) -> None:
        super().__init__(message, extra=extra)
        self.retryable = retryable


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


@runtime_checkable
class DeliveryBackend(Protocol):
    """What every delivery backend offers (see portal/delivery/__init__.py)."""

    name: str

    def apply(self, manifests: list[dict], *, field_manager: str = "kiln") -> list[AppliedRef]: ...

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None: ...

    def delete(self, ref: AppliedRef) -> bool: ...

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict]: ...

    def health(self, ref: AppliedRef) -> Health: ...


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
