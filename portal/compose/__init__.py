"""Composition: a pure function from an approved environment request to Kubernetes manifests.

No Django here. `compose(spec)` returns the manifests in apply order:
Namespace, ResourceQuota, LimitRange, default-deny NetworkPolicy (plus DNS
egress), RoleBinding for the team's group, and on request a Kamaji
TenantControlPlane (with its audit ConfigMap and flow-control objects), a Karpenter NodePool (spot pools diversified over at least
four instance types and three zones), a Crossplane database claim; last the
Argo CD Application that syncs the team's workloads into the namespace.
Every object carries the team, class, TTL class and request labels, so
anything left behind stays attributable.

One module per manifest family: `isolation` (the namespace and its guard rails),
`control_plane` (Kamaji and the datastore pools), `capacity` (Karpenter), `database`
(Crossplane), `argocd` (delivery), `teardown` (what teardown removes first and cordons);
`spec` holds the input, the labels and the shapes they share.
"""

from __future__ import annotations

from portal.compose.argocd import ARGOCD_NAMESPACE, argocd_application
from portal.compose.capacity import (
    A_DEFAULT_TOLERATIONS,
    A_NODE_SELECTOR,
    MIN_SPOT_TYPES,
    MIN_SPOT_ZONES,
    has_own_pool,
    node_pool,
    pool_annotations,
)
from portal.compose.control_plane import (
    KUBERNETES_VERSION,
    TENANT_FLOW_NAME,
    TOKEN_KEY,
    DatastorePool,
    DatastorePoolSpecInvalid,
    PoolsExhausted,
    audit_policy,
    audit_token_secret_name,
    choose_datastore,
    control_plane_manifests,
    flow_control,
    parse_datastore_pools,
    tenant_control_plane,
    tenant_flow_control,
)
from portal.compose.database import database_claim
from portal.compose.isolation import (
    limit_range,
    namespace,
    network_policies,
    resource_quota,
    role_binding,
)
from portal.compose.spec import (
    DEFAULT_GPU_TYPES,
    DEFAULT_ON_DEMAND_TYPES,
    DEFAULT_SPOT_TYPES,
    DEFAULT_ZONES,
    L_CLASS,
    L_ENV,
    L_POOL,
    L_REQUEST,
    L_TEAM,
    L_TTL,
    L_WORKLOAD,
    MANAGED_BY,
    CompositionError,
    EnvironmentSpec,
    labels,
    ttl_class,
)
from portal.compose.teardown import (
    CONTROL_PLANE_KINDS,
    WORKLOAD_KINDS,
    WORKLOAD_RESOURCES,
    cordon,
)


def compose(spec: EnvironmentSpec) -> list[dict]:
    """All manifests for one environment, in apply order (namespace first, Application last)."""
    manifests = [namespace(spec), resource_quota(spec), limit_range(spec)]
    manifests += network_policies(spec)
    manifests.append(role_binding(spec))
    if spec.tenant_control_plane:
        manifests += control_plane_manifests(spec)
    if has_own_pool(spec):
        manifests.append(node_pool(spec))
    if spec.database:
        manifests.append(database_claim(spec))
    manifests.append(argocd_application(spec))
    return manifests


__all__ = [
    "A_DEFAULT_TOLERATIONS",
    "A_NODE_SELECTOR",
    "ARGOCD_NAMESPACE",
    "CONTROL_PLANE_KINDS",
    "DEFAULT_GPU_TYPES",
    "DEFAULT_ON_DEMAND_TYPES",
    "DEFAULT_SPOT_TYPES",
    "DEFAULT_ZONES",
    "KUBERNETES_VERSION",
    "L_CLASS",
    "L_ENV",
    "L_POOL",
    "L_REQUEST",
    "L_TEAM",
    "L_TTL",
    "L_WORKLOAD",
    "MANAGED_BY",
    "MIN_SPOT_TYPES",
    "MIN_SPOT_ZONES",
    "WORKLOAD_KINDS",
    "WORKLOAD_RESOURCES",
    "CompositionError",
    "DatastorePool",
    "DatastorePoolSpecInvalid",
    "EnvironmentSpec",
    "PoolsExhausted",
    "argocd_application",
    "TENANT_FLOW_NAME",
    "TOKEN_KEY",
    "audit_policy",
    "audit_token_secret_name",
    "choose_datastore",
    "compose",
    "control_plane_manifests",
    "cordon",
    "database_claim",
    "flow_control",
    "has_own_pool",
    "labels",
    "limit_range",
    "namespace",
    "network_policies",
    "node_pool",
    "parse_datastore_pools",
    "pool_annotations",
    "resource_quota",
    "role_binding",
    "tenant_control_plane",
    "tenant_flow_control",
    "ttl_class",
]
