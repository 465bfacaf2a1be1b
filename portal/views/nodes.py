"""The environment page's Nodes tab: the nodes its own NodePool launched (htmx partial, polled)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from kiln.cluster import DeliveryError
from kiln.cluster.backends import get_backend
from portal.views.common import env_or_404
from scheduler import placement_reads


@login_required
def environment_nodes(request: HttpRequest, public_id: str) -> HttpResponse:
    """Its own nodes: instance type, zone, capacity type, the pods on each, any freeze."""
    env = env_or_404(request, public_id)
    nodes, error = [], ""
    try:
        nodes = placement_reads.environment_nodes(namespace=env.namespace, backend=get_backend())
    except DeliveryError as exc:  # the tab says so; the rest of the page is unaffected
        error = str(exc)[:200]
    return render(
        request,
        "portal/_nodes.html",
        {
            "env": env,
            "nodes": nodes,
            "error": error,
            "spot": sum(1 for n in nodes if n.capacity_type == "spot"),
            "pods": sum(len(n.pods) for n in nodes),
        },
    )
