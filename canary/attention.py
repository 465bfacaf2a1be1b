"""Canary's items on the attention list (`kiln.attention`): rollouts held inconclusive that the
viewer may steer (extend, promote or abort)."""

from __future__ import annotations

from django.urls import reverse

from canary import selectors
from canary.models import RolloutStatus
from kiln.attention import Item, register
from kiln.identity.permissions import Actor, can_manage_rollout, can_promote_rollout


@register
def rollouts_held(actor: Actor) -> list[Item]:
    """Inconclusive rollouts of teams the viewer steers rollouts for."""
    items = []
    held = selectors.rollout_list(viewer=actor, status=RolloutStatus.INCONCLUSIVE)[:50]
    for rollout in held:
        team = rollout.service.team.slug
        if not (can_manage_rollout(actor, team) or can_promote_rollout(actor, team)):
            continue
        items.append(
            Item(
                key=f"canary.inconclusive:{rollout.pk}:{rollout.ticks_done}",
                kind="inconclusive",
                title=f"Rollout of {rollout.service.name} {rollout.canary_version} is held "
                "inconclusive",
                detail=f"at {rollout.weight}% canary traffic; extend the analysis, promote or "
                "abort",
                url=reverse("canary:rollout-detail", args=[rollout.pk]),
                at=rollout.updated_at,
            )
        )
    return items
