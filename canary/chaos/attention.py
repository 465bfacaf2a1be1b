"""Chaos's items on the attention list (`kiln.attention`): experiments running now against the
services of the viewer's teams, and reverts the cluster never confirmed."""

from __future__ import annotations

from functools import partial

from django.urls import reverse

from canary.chaos import selectors
from canary.chaos.models import ChaosInjection, ExperimentStatus, InjectionState
from kiln.attention import Item, register
from kiln.identity.permissions import Actor, can_run_chaos

# Every chaos item is of kind "experiment".
_item = partial(Item, kind="experiment")


@register
def experiments_on_my_services(actor: Actor) -> list[Item]:
    """Running experiments whose target belongs to one of the viewer's teams."""
    running = selectors.experiment_list(viewer=actor, status=ExperimentStatus.RUNNING)
    items = []
    for exp in running.filter(team__slug__in=list(actor.teams))[:50]:
        target = exp.service or f"{exp.namespace} pods"
        items.append(
            _item(
                key=f"chaos.running:{exp.pk}",
                title=f"Chaos experiment {exp.name} is running on {target}",
                detail=f"{exp.get_fault_display()} by {exp.created_by_name or 'someone'}; "
                "abort it from its page if it hurts",
                url=reverse("chaos:experiment-detail", args=[exp.pk]),
                at=exp.started_at or exp.created_at,
            )
        )
    return items


@register
def levers_engaged(actor: Actor) -> list[Item]:
    """Engaged safety levers the viewer may see: no experiment runs or starts in their scope."""
    items = []
    for lever in selectors.levers_engaged(viewer=actor):
        scope = "platform-wide" if lever.team_id is None else f"for team {lever.team.slug}"
        items.append(
            _item(
                key=f"chaos.lever:{lever.pk}:{lever.engaged_at.isoformat()}",
                title=f"Chaos safety lever engaged {scope}",
                detail=f"by {lever.engaged_by}: {lever.engaged_reason}; no experiment runs or "
                "starts until it is released",
                url=reverse("chaos:lever-list"),
                at=lever.engaged_at,
            )
        )
    return items


@register
def unconfirmed_reverts(actor: Actor) -> list[Item]:
    """Reverts whose read-back still found the fault, for those who may revert it by hand."""
    visible = selectors.experiment_list(viewer=actor)
    items = []
    for injection in (
        ChaosInjection.objects.filter(
            state=InjectionState.UNCONFIRMED, experiment__in=visible
        ).select_related("experiment__team")
    )[:50]:
        exp = injection.experiment
        if not can_run_chaos(actor, exp.team.slug):
            continue
        found = "; ".join(
            f"{e.get('object')}: {e.get('found')}" for e in injection.revert_evidence[:2]
        )
        items.append(
            _item(
                key=f"chaos.unconfirmed:{injection.pk}",
                title=f"The fault of chaos experiment {exp.name} may still be in effect",
                detail=f"its revert was read back {injection.revert_attempts} times and the "
                f"cluster still showed it ({found}); remove it by hand, then check it again",
                url=reverse("chaos:experiment-detail", args=[exp.pk]),
                at=injection.reverted_at,
            )
        )
    return items
