"""The portal's search provider (`kiln.search`): environments by name, namespace or id."""

from __future__ import annotations

from django.db.models import Q
from django.urls import reverse

from kiln.identity.permissions import Actor
from kiln.search import PER_KIND, Hit, register
from portal import selectors
from portal.lifecycle import label


@register
def environments(actor: Actor, query: str) -> list[Hit]:
    """Visible environments whose name or namespace contains the query, or whose id it is."""
    found = (
        selectors.environment_queryset(actor)
        .filter(Q(name__icontains=query) | Q(namespace__icontains=query) | Q(public_id=query))
        .order_by("-created_at")[:PER_KIND]
    )
    return [
        Hit(
            "environment",
            f"{env.team.slug}/{env.name}",
            f"{env.env_class} · {label(env.status, env.status_reason)} · {env.public_id}",
            reverse("portal:environment-detail", args=[env.public_id]),
        )
        for env in found
    ]
