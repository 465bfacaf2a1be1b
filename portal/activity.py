"""What counts as a team's own activity in its namespace, read from the objects there. No Django.

An environment without a tenant control plane has no audit log of its own for Kiln to read, but
the API server records, on every object, who last changed it and when: `metadata.managedFields`,
one entry per field manager (`kubectl` / `kubectl-client-side-apply` for a person, `helm`, a CI
system's name, ...) with the time of its last write. A change by a manager that is not Kiln's
own delivery or the cluster's controllers is the team at work in its namespace.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

# Writers that are not the team: Kiln's delivery (its own field managers all start with "kiln",
# as Argo CD's controller applies what Kiln committed), and the cluster's controllers acting on
# what is already there (ReplicaSets making pods, the scheduler binding them, nodes reporting).
SYSTEM_MANAGERS = frozenset(
    {
        "argocd-controller",
        "argocd-application-controller",
        "karpenter",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
    }
)
OWN_PREFIX = "kiln"


def is_team_manager(manager: str) -> bool:
    """A field manager whose writes are the team's, not Kiln's or a controller's."""
    return bool(manager) and not manager.startswith(OWN_PREFIX) and manager not in SYSTEM_MANAGERS


def _parse(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def latest_team_change(objects: Iterable[dict[str, Any]]) -> datetime | None:
    """The newest time a team's manager changed one of `objects` (status writes left out), or
    None if none did. Malformed entries are passed over: they are evidence of nothing."""
    latest: datetime | None = None
    for obj in objects:
        entries = (obj.get("metadata") or {}).get("managedFields") or []
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict) or entry.get("subresource"):
                continue
            if not is_team_manager(str(entry.get("manager") or "")):
                continue
            when = _parse(entry.get("time"))
            if when is not None and (latest is None or when > latest):
                latest = when
    return latest
