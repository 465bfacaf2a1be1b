"""Tenant control planes: the Kamaji TenantControlPlane and the choice of the datastore pool it
runs on (spread across labels, never past a pool's cap). No Django."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from portal.compose.spec import L_POOL, CompositionError, EnvironmentSpec, metadata

KUBERNETES_VERSION = "v1.33.0"


class PoolsExhausted(CompositionError):
    """Every datastore pool is at its hard cap."""


@dataclass(frozen=True)
class DatastorePool:
    """A Kamaji DataStore that tenant control planes share, with a spread label and a hard cap."""

    name: str
    label: str
    cap: int


def choose_datastore(pools: Sequence[DatastorePool], tenants: Mapping[str, int]) -> DatastorePool:
    """Pick the pool for a new tenant: spread across labels, then fewest tenants, never past a cap.

    Among pools below their cap, the label with the fewest tenants in total wins
    (ties by label), then the pool with the fewest tenants in it (ties by name).
    """
    open_pools = [p for p in pools if tenants.get(p.name, 0) < p.cap]
    if not open_pools:
        raise PoolsExhausted(f"all {len(pools)} datastore pools are at their cap")
    per_label: dict[str, int] = {}
    for pool in pools:
        per_label[pool.label] = per_label.get(pool.label, 0) + tenants.get(pool.name, 0)
    return min(
        open_pools, key=lambda p: (per_label[p.label], p.label, tenants.get(p.name, 0), p.name)
    )


def tenant_control_plane(spec: EnvironmentSpec) -> dict:
    """A Kamaji tenant control plane on the chosen datastore pool."""
    if not spec.datastore:
        raise CompositionError("a tenant control plane needs a datastore pool")
    meta = metadata(spec, spec.namespace, spec.namespace)
    meta["labels"][L_POOL] = spec.datastore
    return {
        "apiVersion": "kamaji.clastix.io/v1alpha1",
        "kind": "TenantControlPlane",
        "metadata": meta,
        "spec": {
            "dataStore": spec.datastore,
            "controlPlane": {
                "deployment": {"replicas": 3 if spec.env_class in ("staging", "prod") else 2},
                "service": {"serviceType": "ClusterIP"},
            },
            "kubernetes": {"version": KUBERNETES_VERSION, "kubelet": {"cgroupfs": "systemd"}},
            "networkProfile": {"port": 6443},
            "addons": {"coreDNS": {}, "kubeProxy": {}},
        },
    }
