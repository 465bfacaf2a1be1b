"""Chaos's items on the attention list (`kiln.attention`): experiments running now against the
services of the viewer's teams."""

from __future__ import annotations

from django.urls import reverse

from canary.chaos import selectors
from canary.chaos.models import ExperimentStatus
from kiln.attention import Item, register
from kiln.identity.permissions import Actor


@register
def experiments_on_my_services(actor: Actor) -> list[Item]:
    """Running experiments whose target belongs to one of the viewer's teams."""
    running = selectors.experiment_list(viewer=actor, status=ExperimentStatus.RUNNING)
    items = []
    for exp in running.filter(team__slug__in=list(actor.teams))[:50]:
        target = exp.service or f"{exp.namespace} pods"
        items.append(
            Item(
                key=f"chaos.running:{exp.pk}",
                kind="experiment",
                title=f"Chaos experiment {exp.name} is running on {target}",
                detail=f"{exp.get_fault_display()} by {exp.created_by_name or 'someone'}; "
                "abort it from its page if it hurts",
                url=reverse("chaos:experiment-detail", args=[exp.pk]),
                at=exp.started_at or exp.created_at,
            )
        )
    return items
