"""Shared helpers of the ownership tests: give a team a namespace the way the cluster records it."""

from __future__ import annotations

from typing import Any

from canary.ownership import TEAM_LABEL


def own_namespace(namespace: str, team_slug: str, backend: Any = None) -> str:
    """Apply Namespace `namespace` labelled `kiln.dev/team=<team_slug>` (the simulated cluster by default)."""
    if backend is None:
        from kiln.cluster.backends import get_backend

        backend = get_backend()
    backend.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace, "labels": {TEAM_LABEL: team_slug}},
            }
        ]
    )
    return namespace


def environment_in(namespace: str, team_slug: str, status: str = "READY") -> Any:
    """A portal environment of team `team_slug` whose namespace is `namespace` (rows only, no cluster)."""
    from django.contrib.auth import get_user_model

    from kiln.identity.models import Team
    from portal.models import Environment, EnvironmentRequest

    team, _ = Team.objects.get_or_create(slug=team_slug, defaults={"name": team_slug})
    user, _ = get_user_model().objects.get_or_create(username=f"{team_slug}-requester")
    name = namespace.removeprefix(f"{team_slug}-")[:40]
    request = EnvironmentRequest.objects.create(
        team=team, name=name, env_class="dev", ttl_hours=8, cpu=1, memory_gib=1, requested_by=user
    )
    return Environment.objects.create(
        request=request, team=team, name=name, namespace=namespace, env_class="dev", status=status
    )
