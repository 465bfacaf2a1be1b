"""The scheduler's search provider (`kiln.search`): nodes by name, among those the viewer may see."""

from __future__ import annotations

from django.urls import reverse

from kiln.cluster.backends import get_backend
from kiln.identity.permissions import Actor
from kiln.search import PER_KIND, Hit, register
from scheduler.cluster_reads import visible_node_names
from scheduler.models import Node


@register
def nodes(actor: Actor, query: str) -> list[Hit]:
    """Visible nodes whose name contains the query (the node list's visibility rule)."""
    names = list(
        Node.objects.filter(name__icontains=query).order_by("name").values_list("name", flat=True)
    )
    if not names:
        return []
    visible = visible_node_names(viewer=actor, backend=get_backend())
    found = Node.objects.filter(name__in=[n for n in names if n in visible])[:PER_KIND]
    overview = reverse("scheduler:overview")
    return [
        Hit(
            "node",
            node.name,
            f"{node.instance_type or 'unknown type'} · {node.capacity_type} · {node.zone or '—'}",
            f"{overview}#nodes-section",
        )
        for node in found
    ]
