"""Chaos's home-page panel: experiments whose fault is live now, and any engaged safety lever."""

from __future__ import annotations

from canary.chaos import selectors
from canary.chaos.models import ExperimentStatus
from kiln.dashboard import Panel, register
from kiln.identity.permissions import Actor


@register
def running_experiments(actor: Actor) -> Panel | None:
    """Experiments running now."""
    running = list(selectors.experiment_list(viewer=actor, status=ExperimentStatus.RUNNING)[:8])
    levers = selectors.levers_engaged(viewer=actor)
    return Panel("chaos/_dashboard.html", {"experiments": running, "levers": levers}, order=35)
