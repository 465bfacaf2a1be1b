"""Selector of the environment page's resource tree: its applied objects as the cluster
describes them (`DeliveryBackend.describe`), the namespace at the root, Argo CD style."""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.cluster import AppliedRef, DeliveryError
from kiln.cluster.backends import get_backend
from kiln.cluster.tree import ObjectState
from portal.lifecycle import Status
from portal.models import Environment


@dataclass
class TreeNode:
    """One object of the tree and the objects under it."""

    state: ObjectState
    children: list[TreeNode] = field(default_factory=list)

    @property
    def badge(self) -> str:
        """The badge class of its health."""
        status = self.state.health.status.value
        return {"Healthy": "ok", "Degraded": "bad", "Missing": "bad"}.get(status, "warn")

    @property
    def sync_badge(self) -> str:
        """The badge class of its sync state."""
        return {"Synced": "ok", "OutOfSync": "bad"}.get(self.state.sync.value, "muted")


@dataclass(frozen=True)
class ResourceTree:
    """The environment's objects as a forest (the namespace first), or why it cannot be read."""

    roots: list[TreeNode]
    error: str = ""


def environment_tree(env: Environment) -> ResourceTree:
    """The environment's applied objects under their namespace, each with health, sync, events."""
    if not env.applied_refs or env.status == Status.DELETED:
        return ResourceTree([])
    refs = [AppliedRef.from_dict(raw) for raw in env.applied_refs]
    try:
        states = get_backend().describe(refs)
    except DeliveryError as exc:
        return ResourceTree([], error=f"the cluster did not answer: {exc.message}")
    nodes = [TreeNode(state) for state in states]
    namespaces = {
        n.state.ref.name: n
        for n in nodes
        if n.state.ref.kind == "Namespace" and n.state.ref.api_version == "v1"
    }
    roots: list[TreeNode] = []
    for node in nodes:
        parent = namespaces.get(node.state.ref.namespace)
        if parent is not None and node is not parent:
            parent.children.append(node)
        else:
            roots.append(node)
    roots.sort(key=lambda n: (n.state.ref.kind != "Namespace", n.state.ref.kind, n.state.ref.name))
    for root in roots:
        root.children.sort(key=lambda n: (n.state.ref.kind, n.state.ref.name))
    return ResourceTree(roots)
