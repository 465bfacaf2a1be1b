"""What composition starts from: the environment spec, the labels every object carries, the
metadata and object shapes the manifest families share, and composition's errors. No Django."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MANAGED_BY = "app.kubernetes.io/managed-by"
L_TEAM = "kiln.dev/team"
L_CLASS = "kiln.dev/env-class"
L_TTL = "kiln.dev/ttl-class"
L_REQUEST = "kiln.dev/request-id"
L_ENV = "kiln.dev/environment"
L_WORKLOAD = "kiln.dev/workload-class"
L_POOL = "kiln.dev/datastore-pool"

DEFAULT_SPOT_TYPES = ("m6i.xlarge", "m6a.xlarge", "m5.xlarge", "m7i.xlarge", "c6i.2xlarge")
DEFAULT_ON_DEMAND_TYPES = ("m6i.xlarge", "m6i.2xlarge", "m7i.xlarge")
DEFAULT_GPU_TYPES = ("g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge")
DEFAULT_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")  # where the pricing and nodes are


class CompositionError(ValueError):
    """The request cannot be composed (e.g. too few instance types for a spot pool)."""


@dataclass(frozen=True)
class EnvironmentSpec:
    """Everything composition needs; built from an approved request by the portal."""

    request_id: str
    team: str
    name: str
    namespace: str
    env_class: str
    ttl_hours: int
    workload_class: str
    cpu: int
    memory_gib: int
    gpu: int = 0
    tenant_control_plane: bool = False
    spot_node_pool: bool = False
    database: bool = False
    team_group: str = ""
    datastore: str = ""
    gitops_repo_url: str = "file:///var/lib/kiln/gitops.git"
    gitops_path_prefix: str = "environments"
    spot_instance_types: tuple[str, ...] = DEFAULT_SPOT_TYPES
    on_demand_instance_types: tuple[str, ...] = DEFAULT_ON_DEMAND_TYPES
    gpu_instance_types: tuple[str, ...] = DEFAULT_GPU_TYPES
    zones: tuple[str, ...] = DEFAULT_ZONES
    # Instance type -> (vCPUs, memory GiB), from the price book: a NodePool's limits must hold
    # whole nodes of the types it may launch (empty: limits from the quota alone).
    node_shapes: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    node_class: str = "default"
    tenant_domain: str = "tenants.kiln.internal"
    tenant_audit_sink: str = "https://kiln.kiln-system.svc/hooks/tenant-audit"
    extra_labels: Mapping[str, str] = field(default_factory=dict)


def ttl_class(ttl_hours: int) -> str:
    """Bucket a TTL for labels: day (<=24h), week (<=7d), month (<=30d), long."""
    if ttl_hours <= 24:
        return "day"
    if ttl_hours <= 24 * 7:
        return "week"
    if ttl_hours <= 24 * 30:
        return "month"
    return "long"


def labels(spec: EnvironmentSpec) -> dict[str, str]:
    """The labels every composed object carries."""
    base = {
        MANAGED_BY: "kiln",
        L_TEAM: spec.team,
        L_CLASS: spec.env_class,
        L_TTL: ttl_class(spec.ttl_hours),
        L_REQUEST: spec.request_id,
        L_ENV: spec.namespace,
    }
    base.update(spec.extra_labels)
    return base


def metadata(spec: EnvironmentSpec, name: str, namespace: str | None = None, **extra: Any) -> dict:
    """An object's metadata: its name, the labels, and its namespace when it has one."""
    meta: dict[str, Any] = {"name": name, "labels": labels(spec)}
    if namespace:
        meta["namespace"] = namespace
    meta.update(extra)
    return meta


def namespaced(
    spec: EnvironmentSpec, api_version: str, kind: str, name: str, /, **body: Any
) -> dict:
    """An object in the environment's namespace: apiVersion, kind, labelled metadata, then the
    body's fields (spec, roleRef, ...) in the order given."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": metadata(spec, name, spec.namespace),
        **body,
    }
