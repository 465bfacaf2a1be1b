"""Canary's search provider (`kiln.search`): rollouts by service, version or id."""

from __future__ import annotations

import uuid

from django.db.models import Q, QuerySet
from django.urls import reverse

from canary import selectors
from canary.models import Rollout
from kiln.identity.permissions import Actor
from kiln.search import PER_KIND, Hit, register


def id_filter(query: str) -> Q:
    """Q matching the primary key when the query is a UUID, else nothing."""
    try:
        return Q(pk=uuid.UUID(query))
    except ValueError:
        return Q(pk__in=[])


def matching(rows: QuerySet, query: str, *fields: str) -> QuerySet:
    """The first PER_KIND of `rows` where any of `fields` contains the query, or whose id it is."""
    match = id_filter(query)
    for field in fields:
        match |= Q(**{f"{field}__icontains": query})
    return rows.filter(match)[:PER_KIND]


def _rollout_hit(r: Rollout) -> Hit:
    return Hit(
        "rollout",
        f"{r.service.name} {r.baseline_version} → {r.canary_version}",
        f"{r.service.team.slug} · {r.get_status_display()} · {r.weight}% canary",
        reverse("canary:rollout-detail", args=[r.pk]),
    )


@register
def rollouts(actor: Actor, query: str) -> list[Hit]:
    """Visible rollouts whose service or versions contain the query, or whose id it is."""
    rows = selectors.rollout_list(viewer=actor)
    found = matching(rows, query, "service__name", "canary_version", "baseline_version")
    return [_rollout_hit(r) for r in found]
