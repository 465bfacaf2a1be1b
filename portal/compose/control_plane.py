"""Tenant control planes: the Kamaji TenantControlPlane, what ships with it (API Priority and
Fairness objects, the tenant audit policy and sink), and the datastore pools it runs on (spread
across labels, never past a pool's hard cap). No Django.

What ships with every TenantControlPlane, and why:

- a FlowSchema and PriorityLevelConfiguration (`flowcontrol.apiserver.k8s.io/v1`) that put
  service-account writes in their own priority level, queued per user
  (`distinguisherMethod: ByUser`), so one reconcile loop writing in a tight loop queues
  behind itself instead of starving other tenants of the shared datastore: in the host
  cluster for the environment's namespace (`flow_control`, part of the plan), and inside the
  tenant's own API server for every service account there (`tenant_flow_control`, written
  through that API server once it serves, never committed: a tenant cluster is not Argo CD's);
- konnectivity, so nodes open the tunnel to the control plane outbound;
- `certSANs` for every name the API server is reached by;
- bounded API server resources, per class;
- an audit policy and a webhook sink (a ConfigMap mounted into the API server), so the
  tenant's own record of who did what inside it reaches Kiln before the control plane goes;
  the webhook's bearer token is a file from a Secret (`audit_token_secret_name`) that Kiln
  writes straight to the cluster, never into the plan or Git. client-go rereads a
  `tokenFile`, so a new token reaches a running API server without a restart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from portal.compose.spec import L_POOL, CompositionError, EnvironmentSpec, metadata

KUBERNETES_VERSION = "v1.33.0"
API_SERVER_PORT = 6443
KONNECTIVITY_PORT = 8132
AUDIT_MOUNT = "/etc/kiln/tenant-audit"
AUDIT_VOLUME = "kiln-tenant-audit"
# Where the sink token is mounted, from which volume and Secret key (names, not credentials).
TOKEN_MOUNT = "/etc/kiln/tenant-audit-token"  # noqa: S105
TOKEN_VOLUME = "kiln-tenant-audit-token"  # noqa: S105
TOKEN_KEY = "token"  # noqa: S105
TENANT_FLOW_NAME = "kiln-tenant-sa-writes"
# Writes of a service account: what a controller in a tight loop sends.
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
# Before the built-in `service-accounts` (9000) and `workload-low` (9000) schemas.
FLOW_PRECEDENCE = 800
# Kube-apiserver requests and limits per class: small for short-lived classes, room for
# staging and prod; limits cap what one tenant's API server can take from its node.
API_SERVER_RESOURCES = {
    "small": {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    },
    "large": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
}
KONNECTIVITY_RESOURCES = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"cpu": "500m", "memory": "256Mi"},
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MAX_POOL_CAP = 10_000


class PoolsExhausted(CompositionError):
    """Every datastore pool is at its hard cap."""


class DatastorePoolSpecInvalid(CompositionError):
    """The datastore pool spec (`name:label:cap,...`) does not parse; the message says where."""


@dataclass(frozen=True)
class DatastorePool:
    """A Kamaji DataStore that tenant control planes share, with a spread label and a hard cap."""

    name: str
    label: str
    cap: int


def parse_datastore_pools(raw: str) -> list[DatastorePool]:
    """Parse `name:label:cap` entries separated by commas, or raise DatastorePoolSpecInvalid.

    A name is a DNS-1123 label (it names a Kamaji DataStore), so is the label; a cap is a
    whole number from 1 to 10,000; names are unique; at least one pool.
    """
    entries = [e.strip() for e in str(raw).split(",")]
    if not any(entries):
        raise DatastorePoolSpecInvalid("no datastore pool given: expected name:label:cap,...")
    pools: list[DatastorePool] = []
    for position, entry in enumerate(entries, start=1):
        where = f"entry {position} ({entry!r})"
        parts = entry.split(":")
        if len(parts) != 3:
            raise DatastorePoolSpecInvalid(f"{where}: expected name:label:cap")
        name, label, cap = (p.strip() for p in parts)
        if not _DNS_LABEL.match(name):
            raise DatastorePoolSpecInvalid(f"{where}: the name must be a DNS-1123 label")
        if not _DNS_LABEL.match(label):
            raise DatastorePoolSpecInvalid(f"{where}: the label must be a DNS-1123 label")
        if not cap.isascii() or not cap.isdigit() or not 1 <= int(cap) <= MAX_POOL_CAP:
            raise DatastorePoolSpecInvalid(
                f"{where}: the cap must be a whole number from 1 to {MAX_POOL_CAP}"
            )
        if any(p.name == name for p in pools):
            raise DatastorePoolSpecInvalid(f"{where}: pool {name} is given twice")
        pools.append(DatastorePool(name, label, int(cap)))
    return pools


def choose_datastore(pools: Sequence[DatastorePool], tenants: Mapping[str, int]) -> DatastorePool:
    """Pick the pool for a new tenant: spread across labels, then fewest tenants, never past a cap.

    Among pools below their cap, the label with the fewest tenants in total wins
    (ties by label), then the pool with the fewest tenants in it (ties by name).
    """
    open_pools = [p for p in pools if tenants.get(p.name, 0) < p.cap]
    if not open_pools:
        caps = ", ".join(f"{p.name} {tenants.get(p.name, 0)}/{p.cap}" for p in pools)
        raise PoolsExhausted(f"every datastore pool is at its cap ({caps})")
    per_label: dict[str, int] = {}
    for pool in pools:
        per_label[pool.label] = per_label.get(pool.label, 0) + tenants.get(pool.name, 0)
    return min(
        open_pools, key=lambda p: (per_label[p.label], p.label, tenants.get(p.name, 0), p.name)
    )


def _large(spec: EnvironmentSpec) -> bool:
    return spec.env_class in ("staging", "prod")


def cert_sans(spec: EnvironmentSpec) -> list[str]:
    """Every name the tenant API server answers to: its Service in the host cluster (short and
    fully qualified) and its external name under the tenant domain."""
    svc = f"{spec.namespace}.{spec.namespace}.svc"
    return [f"{spec.namespace}.{spec.tenant_domain}", svc, f"{svc}.cluster.local"]


def _flow_objects(spec: EnvironmentSpec, name: str, subject: dict, meta: dict) -> list[dict]:
    """A PriorityLevelConfiguration and the FlowSchema sending `subject`'s writes to it, per user."""
    priority = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": dict(meta),
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 20 if _large(spec) else 10,
                "lendablePercent": 0,
                "limitResponse": {
                    "type": "Queue",
                    "queuing": {"queues": 32, "handSize": 4, "queueLengthLimit": 50},
                },
            },
        },
    }
    flow = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": dict(meta),
        "spec": {
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": FLOW_PRECEDENCE,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [subject],
                    "resourceRules": [
                        {
                            "verbs": list(WRITE_VERBS),
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "namespaces": ["*"],
                            "clusterScope": True,
                        }
                    ],
                }
            ],
        },
    }
    return [priority, flow]


def flow_control(spec: EnvironmentSpec) -> list[dict]:
    """The PriorityLevelConfiguration and FlowSchema bounding the environment's service-account
    writes to the host API server, queued per user (one service account cannot take another's
    share)."""
    name = f"kiln-{spec.namespace}-sa-writes"
    subject = {
        "kind": "ServiceAccount",
        "serviceAccount": {"namespace": spec.namespace, "name": "*"},
    }
    return _flow_objects(spec, name, subject, metadata(spec, name))


def tenant_flow_control(spec: EnvironmentSpec) -> list[dict]:
    """The same bound inside the tenant's own API server, for every service account of the
    tenant's cluster (the group `system:serviceaccounts`), queued per user."""
    subject = {"kind": "Group", "group": {"name": "system:serviceaccounts"}}
    return _flow_objects(spec, TENANT_FLOW_NAME, subject, metadata(spec, TENANT_FLOW_NAME))


def audit_policy() -> dict:
    """The tenant API server's audit policy: writes with their request body, reads of secrets
    and tokens as metadata only (never their content), health and watch noise left out."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "None", "nonResourceURLs": ["/healthz*", "/livez*", "/readyz*", "/version"]},
            {"level": "None", "verbs": ["watch"]},
            {
                "level": "Metadata",
                "resources": [
                    {"group": "", "resources": ["secrets", "configmaps", "serviceaccounts/token"]},
                    {"group": "authentication.k8s.io", "resources": ["tokenreviews"]},
                ],
            },
            {"level": "Request", "verbs": list(WRITE_VERBS)},
            {"level": "Metadata"},
        ],
    }


def audit_sink_url(spec: EnvironmentSpec) -> str:
    """Where the tenant API server's audit webhook posts its EventLists: Kiln's sink, per environment."""
    return f"{spec.tenant_audit_sink.rstrip('/')}/{spec.request_id}/"


def audit_token_secret_name(spec: EnvironmentSpec) -> str:
    """The Secret in the environment's namespace holding the sink token the webhook sends."""
    return f"{spec.namespace}-tenant-audit-token"


def audit_config(spec: EnvironmentSpec) -> dict:
    """The ConfigMap mounted into the tenant API server: the audit policy and the webhook's
    kubeconfig naming Kiln's sink."""
    webhook = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kiln-audit-sink", "cluster": {"server": audit_sink_url(spec)}}],
        "users": [
            {"name": "tenant-api-server", "user": {"tokenFile": f"{TOKEN_MOUNT}/{TOKEN_KEY}"}}
        ],
        "contexts": [
            {"name": "sink", "context": {"cluster": "kiln-audit-sink", "user": "tenant-api-server"}}
        ],
        "current-context": "sink",
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(spec, f"{spec.namespace}-tenant-audit", spec.namespace),
        "data": {
            "policy.yaml": yaml.safe_dump(audit_policy(), sort_keys=True),
            "webhook.kubeconfig": yaml.safe_dump(webhook, sort_keys=True),
        },
    }


def api_server_args() -> list[str]:
    """Flags that turn on the audit policy and batched webhook sink, and API Priority and Fairness."""
    return [
        f"--audit-policy-file={AUDIT_MOUNT}/policy.yaml",
        f"--audit-webhook-config-file={AUDIT_MOUNT}/webhook.kubeconfig",
        "--audit-webhook-mode=batch",
        "--audit-webhook-batch-max-wait=5s",
        "--enable-priority-and-fairness=true",
    ]


def tenant_control_plane(spec: EnvironmentSpec) -> dict:
    """A Kamaji tenant control plane on the chosen datastore pool (see the module docstring)."""
    if not spec.datastore:
        raise CompositionError("a tenant control plane needs a datastore pool")
    meta = metadata(spec, spec.namespace, spec.namespace)
    meta["labels"][L_POOL] = spec.datastore
    size = "large" if _large(spec) else "small"
    return {
        "apiVersion": "kamaji.clastix.io/v1alpha1",
        "kind": "TenantControlPlane",
        "metadata": meta,
        "spec": {
            "dataStore": spec.datastore,
            "controlPlane": {
                "deployment": {
                    "replicas": 3 if _large(spec) else 2,
                    "resources": {"apiServer": API_SERVER_RESOURCES[size]},
                    "extraArgs": {"apiServer": api_server_args()},
                    "additionalVolumes": [
                        {
                            "name": AUDIT_VOLUME,
                            "configMap": {"name": f"{spec.namespace}-tenant-audit"},
                        },
                        {
                            "name": TOKEN_VOLUME,
                            "secret": {"secretName": audit_token_secret_name(spec)},
                        },
                    ],
                    "additionalVolumeMounts": {
                        "apiServer": [
                            {"name": AUDIT_VOLUME, "mountPath": AUDIT_MOUNT, "readOnly": True},
                            {"name": TOKEN_VOLUME, "mountPath": TOKEN_MOUNT, "readOnly": True},
                        ]
                    },
                },
                "service": {"serviceType": "ClusterIP"},
            },
            "kubernetes": {"version": KUBERNETES_VERSION, "kubelet": {"cgroupfs": "systemd"}},
            "networkProfile": {"port": API_SERVER_PORT, "certSANs": cert_sans(spec)},
            "addons": {
                "coreDNS": {},
                "kubeProxy": {},
                "konnectivity": {
                    "server": {"port": KONNECTIVITY_PORT, "resources": KONNECTIVITY_RESOURCES},
                    "agent": {"mode": "DaemonSet"},
                },
            },
        },
    }


def control_plane_manifests(spec: EnvironmentSpec) -> list[dict]:
    """What a tenant control plane brings, in apply order: the audit ConfigMap it mounts, the
    flow-control objects, then the TenantControlPlane."""
    return [audit_config(spec), *flow_control(spec), tenant_control_plane(spec)]
