"""Chaos's search provider (`kiln.search`): experiments by name, target or id."""

from __future__ import annotations

from django.urls import reverse

from canary.chaos import selectors
from canary.chaos.models import ChaosExperiment
from canary.search import matching
from kiln.identity.permissions import Actor
from kiln.search import Hit, register


def _experiment_hit(exp: ChaosExperiment) -> Hit:
    return Hit(
        "experiment",
        exp.name,
        f"{exp.team.slug} · {exp.get_fault_display()} · {exp.get_status_display()}",
        reverse("chaos:experiment-detail", args=[exp.pk]),
    )


@register
def experiments(actor: Actor, query: str) -> list[Hit]:
    """Visible experiments whose name, namespace or service contains the query, or whose id it is."""
    found = matching(selectors.experiment_list(viewer=actor), query, "name", "namespace", "service")
    return [_experiment_hit(exp) for exp in found]
