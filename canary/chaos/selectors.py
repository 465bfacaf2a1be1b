"""Chaos reads: experiments a viewer may see, lease state, injection timelines, safety levers.

Stop-condition signals are read by canary/chaos/stop_signals.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone

from canary.chaos.leases import TIMING_FIELDS, LeaseTimings, expires_at
from canary.chaos.models import ChaosExperiment, ChaosInjection, ChaosLease, ChaosLever, LeverScope
from kiln.errors import NotFound
from kiln.identity import visibility
from kiln.identity.models import Team
from kiln.identity.permissions import Actor


def experiment_list(*, viewer: Actor, status: str | None = None) -> QuerySet[ChaosExperiment]:
    """Experiments the viewer may see (kiln.identity.visibility.EXPERIMENTS)."""
    qs = visibility.restrict(
        ChaosExperiment.objects.select_related("team", "lease"),
        viewer,
        visibility.EXPERIMENTS,
        team_field="team__slug",
    )
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-created_at")


def experiment_get(*, viewer: Actor, experiment_id: Any) -> ChaosExperiment:
    """One experiment, or NotFound when it is missing or invisible to the viewer (same answer)."""
    rows = visibility.restrict(
        ChaosExperiment.objects.select_related("team"),
        viewer,
        visibility.EXPERIMENTS,
        team_field="team__slug",
    )
    try:
        return rows.get(pk=experiment_id)
    except (ChaosExperiment.DoesNotExist, ValueError, TypeError, ValidationError) as exc:
        raise NotFound("No such experiment.") from exc


def timings_of(exp: ChaosExperiment) -> LeaseTimings:
    """The lease timings fixed on the experiment at creation."""
    return LeaseTimings(**{name: getattr(exp, name) for name in TIMING_FIELDS})


@dataclass(frozen=True)
class LeaseState:
    """What a dashboard shows about a lease."""

    holder: str
    resource_version: int
    term: int
    renewals: int
    acquired_at: datetime | None
    renewed_at: datetime | None
    expires_at: datetime | None
    held: bool
    seconds_left: float | None


def lease_state(exp: ChaosExperiment, *, now: datetime | None = None) -> LeaseState:
    """The live lease state of an experiment: holder, renewals, expiry."""
    now = now or timezone.now()
    try:
        lease = exp.lease  # loaded with the experiment by experiment_list, else one query
    except ChaosLease.DoesNotExist:
        lease = None
    # A lease with no holder or never renewed has no expiry: nobody holds it.
    holder = lease.holder if lease is not None and lease.renewed_at is not None else ""
    expiry = expires_at(lease.renewed_at, timings_of(exp)) if holder else None
    left = (expiry - now).total_seconds() if expiry else None
    return LeaseState(
        holder=holder,
        resource_version=lease.resource_version if lease else 0,
        term=lease.transitions if lease else 0,
        renewals=lease.renewals if lease else 0,
        acquired_at=lease.acquired_at if lease else None,
        renewed_at=lease.renewed_at if lease else None,
        expires_at=expiry,
        held=left is not None and left > 0,
        seconds_left=None if left is None else max(0.0, left),
    )


def injection_list(exp: ChaosExperiment) -> QuerySet[ChaosInjection]:
    """Every injection of an experiment, oldest first."""
    return ChaosInjection.objects.filter(experiment=exp).order_by("created_at", "id")


def live_injections() -> QuerySet[ChaosInjection]:
    """Injections not yet reverted, with their experiment and lease."""
    return ChaosInjection.objects.filter(reverted_at__isnull=True).select_related(
        "experiment", "experiment__lease"
    )


def live_injection_of(exp_id: Any) -> ChaosInjection | None:
    """The one unreverted injection of an experiment, if any."""
    return ChaosInjection.objects.filter(experiment_id=exp_id, reverted_at__isnull=True).first()


def levers_for(*, viewer: Actor) -> list[ChaosLever]:
    """The platform lever and the team levers the viewer may see (visibility.EXPERIMENTS),
    engaged ones first; a lever never moved has no row and is released."""
    team_levers = visibility.restrict(
        ChaosLever.objects.filter(scope=LeverScope.TEAM).select_related("team"),
        viewer,
        visibility.EXPERIMENTS,
        team_field="team__slug",
    )
    rows = list(ChaosLever.objects.filter(scope=LeverScope.PLATFORM)) + list(team_levers)
    return sorted(rows, key=lambda lever: (not lever.engaged, lever.scope != "platform"))


def lever_teams(*, viewer: Actor) -> list[str]:
    """The teams whose lever the viewer may see (visibility.EXPERIMENTS): a platform admin's or
    an auditor's every team, whether or not its lever was ever moved; otherwise its own."""
    teams = visibility.restrict(
        Team.objects.all(), viewer, visibility.EXPERIMENTS, team_field="slug"
    )
    return sorted(teams.values_list("slug", flat=True))


def levers_engaged(*, viewer: Actor) -> list[ChaosLever]:
    """The engaged levers the viewer may see: what every chaos page and the home page show."""
    return [lever for lever in levers_for(viewer=viewer) if lever.engaged]


def lever_get(*, viewer: Actor, team_slug: str | None) -> ChaosLever | None:
    """The platform lever (team_slug None) or a team's, None if never moved; NotFound for a
    team the viewer may not see (the same answer as a team that does not exist)."""
    if team_slug is None:
        return ChaosLever.objects.filter(scope=LeverScope.PLATFORM).first()
    if not visibility.sees(viewer, visibility.EXPERIMENTS, team_slug):
        raise NotFound("No such team.")
    return (
        ChaosLever.objects.filter(scope=LeverScope.TEAM, team__slug=team_slug)
        .select_related("team")
        .first()
    )
