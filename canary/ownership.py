"""Who owns a namespace, and the checks every write that routes traffic into one goes through.

A namespace belongs to a team when

- the cluster has the Namespace and its `kiln.dev/team` label names the team
  (the cluster decides: Kiln's composition labels every environment's namespace,
  and a namespace that changed hands carries its new owner's label), or
- the cluster has no such Namespace yet and a live portal environment of the
  team has it as its namespace (requested or provisioning; the database allows
  one live environment per namespace).

A Namespace in the cluster without the label belongs to nobody, and nothing
else (a canary service row, an experiment) ever confers ownership: those are
what these checks guard. Callers: `canary.services` (service registration,
rollout creation and start) and `canary.chaos.services` (experiments), which the
API, the portal pages and the admin all go through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from canary.hosts import FOREIGN, HostRefused, canonical_service_host
from kiln.cluster.backends import get_backend
from kiln.errors import Forbidden, InvalidInput
from portal.lifecycle import LIVE
from portal.models import Environment

TEAM_LABEL = "kiln.dev/team"


class NamespaceNotOwned(Forbidden):
    """The namespace does not belong to the team (or belongs to nobody)."""

    code = "namespace_not_owned"


class ForeignHost(Forbidden):
    """The host names a service of another namespace."""

    code = "foreign_host"


class InvalidHost(InvalidInput):
    """The host is not a service host of the namespace in any accepted form."""

    code = "invalid_host"


def _backend(backend: Any) -> Any:
    return backend if backend is not None else get_backend()


def namespace_owner(namespace: str, backend: Any = None) -> str | None:
    """The slug of the team owning `namespace` (see the module docstring), or None."""
    obj = _backend(backend).get("v1", "Namespace", "", namespace)
    if obj is not None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        team = labels.get(TEAM_LABEL)
        return team if isinstance(team, str) and team else None
    slugs = set(
        Environment.objects.filter(
            namespace=namespace, status__in=[s.value for s in LIVE]
        ).values_list("team__slug", flat=True)
    )
    return slugs.pop() if len(slugs) == 1 else None


def namespace_in_cluster(namespace: str, backend: Any = None) -> bool:
    """True if the cluster has the Namespace: an environment's is owned from its request, but
    exists only once provisioned (a fault needs the pods in it)."""
    return _backend(backend).get("v1", "Namespace", "", namespace) is not None


def namespaces_of(
    teams: Callable[[str], bool], backend: Any = None, *, in_cluster_only: bool = False
) -> list[str]:
    """Every namespace owned by a team `teams(slug)` accepts, by `namespace_owner`'s rule: the
    cluster's Namespaces by their label, and (unless `in_cluster_only`) live environments'
    namespaces not in it yet."""
    owned: set[str] = set()
    in_cluster: set[str] = set()
    for obj in _backend(backend).list("v1", "Namespace"):
        metadata = obj.get("metadata") or {}
        name = str(metadata.get("name") or "")
        in_cluster.add(name)
        team = (metadata.get("labels") or {}).get(TEAM_LABEL)
        if isinstance(team, str) and team and teams(team):
            owned.add(name)
    if in_cluster_only:
        return sorted(owned)
    for namespace, team in Environment.objects.filter(
        status__in=[s.value for s in LIVE]
    ).values_list("namespace", "team__slug"):
        if namespace not in in_cluster and teams(team):
            owned.add(namespace)
    return sorted(owned)


def require_namespace_of(team_slug: str, namespace: str, backend: Any = None) -> None:
    """Raise NamespaceNotOwned (403) unless `namespace` belongs to team `team_slug`.

    The message is the same for a foreign and an unknown namespace, so a refusal
    never tells who owns someone else's namespace.
    """
    if namespace_owner(namespace, backend) != team_slug:
        raise NamespaceNotOwned(
            f"namespace {namespace} does not belong to team {team_slug}: use the namespace "
            f"of one of the team's environments or one labelled {TEAM_LABEL}={team_slug}",
            extra={"namespace": namespace, "team": team_slug},
        )


def require_service_host(host: Any, namespace: str, *, field: str = "host") -> str:
    """The fully qualified form of `host`, a service of `namespace`; InvalidHost (400) or ForeignHost (403)."""
    try:
        return canonical_service_host(host, namespace)
    except HostRefused as exc:
        if exc.kind == FOREIGN:
            raise ForeignHost(
                f"{field} {_shown(host)} is not a service of namespace {namespace}: {exc.reason}",
                extra={"fields": {field: [exc.reason]}},
            ) from None
        raise InvalidHost(
            f"{field} {_shown(host)} is not a service host: {exc.reason}",
            extra={"fields": {field: [exc.reason]}},
        ) from None


def _shown(value: Any) -> str:
    """A bounded, quoted rendering of client input for a message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def ownership_refusal(team_slug: str, namespace: str, host: str, backend: Any = None) -> str | None:
    """Why a stored (namespace, host) may no longer be routed by `team_slug`, or None if it may."""
    try:
        require_namespace_of(team_slug, namespace, backend)
        require_service_host(host, namespace)
    except (Forbidden, InvalidInput) as exc:
        return exc.message
    return None
