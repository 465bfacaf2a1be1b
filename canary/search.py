"""Canary's search provider (`kiln.search`): rollouts by service, version or id."""

from __future__ import annotations

import uuid

from django.db.models import Q
from django.urls import reverse

from canary import selectors
from kiln.identity.permissions import Actor
from kiln.search import PER_KIND, Hit, register


def id_filter(query: str) -> Q:
    """Q matching the primary key when the query is a UUID, else nothing."""
    try:
        return Q(pk=uuid.UUID(query))
    except ValueError:
        return Q(pk__in=[])


@register
def rollouts(actor: Actor, query: str) -> list[Hit]:
    """Visible rollouts whose service or versions contain the query, or whose id it is."""
    found = selectors.rollout_list(viewer=actor).filter(
        Q(service__name__icontains=query)
        | Q(canary_version__icontains=query)
        | Q(baseline_version__icontains=query)
        | id_filter(query)
    )[:PER_KIND]
    return [
        Hit(
            "rollout",
            f"{r.service.name} {r.baseline_version} → {r.canary_version}",
            f"{r.service.team.slug} · {r.get_status_display()} · {r.weight}% canary",
            reverse("canary:rollout-detail", args=[r.pk]),
        )
        for r in found
    ]
