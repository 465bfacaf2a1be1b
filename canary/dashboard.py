"""Canary's and chaos's home-page panel: rollouts and experiments running now."""

from __future__ import annotations

from canary import selectors
from canary.models import RolloutStatus
from kiln.dashboard import Panel, register
from kiln.identity.permissions import Actor


@register
def running_rollouts(actor: Actor) -> Panel | None:
    """Rollouts still moving traffic (or waiting for a person)."""
    rollouts = list(
        selectors.rollout_list(viewer=actor).filter(
            status__in=[RolloutStatus.RUNNING, RolloutStatus.INCONCLUSIVE]
        )[:8]
    )
    return Panel("canary/_dashboard_rollouts.html", {"rollouts": rollouts}, order=30)
