"""Rollout pages: the list and the live dashboard of one rollout (thin; data from selectors)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render

from canary import selectors
from kiln.errors import NotFound
from kiln.identity.permissions import actor_from_request


@login_required
def rollout_list(request):
    """Every rollout the viewer may see, newest first."""
    actor = actor_from_request(request)
    rollouts = selectors.rollout_list(viewer=actor, status=request.GET.get("status") or None)[:200]
    return render(request, "canary/rollouts/list.html", {"rollouts": rollouts})


@login_required
def rollout_detail(request, rollout_id):
    """One rollout: facts, the live chart (websocket) and the decisions."""
    actor = actor_from_request(request)
    try:
        rollout = selectors.rollout_get(viewer=actor, rollout_id=rollout_id)
    except NotFound as exc:
        raise Http404("no such rollout") from exc
    return render(
        request,
        "canary/rollouts/detail.html",
        {"rollout": rollout, "decisions": rollout.decisions.order_by("created_at", "id")},
    )
