"""Chaos's search provider (`kiln.search`): experiments by name, target or id."""

from __future__ import annotations

from django.db.models import Q
from django.urls import reverse

from canary.chaos import selectors
from canary.search import id_filter
from kiln.identity.permissions import Actor
from kiln.search import PER_KIND, Hit, register


@register
def experiments(actor: Actor, query: str) -> list[Hit]:
    """Visible experiments whose name, namespace or service contains the query, or whose id it is."""
    found = selectors.experiment_list(viewer=actor).filter(
        Q(name__icontains=query)
        | Q(namespace__icontains=query)
        | Q(service__icontains=query)
        | id_filter(query)
    )[:PER_KIND]
    return [
        Hit(
            "experiment",
            exp.name,
            f"{exp.team.slug} · {exp.get_fault_display()} · {exp.get_status_display()}",
            reverse("chaos:experiment-detail", args=[exp.pk]),
        )
        for exp in found
    ]
