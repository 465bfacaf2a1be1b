"""Safety levers: engage one and every experiment in its scope stops, and none starts until released.

There is one lever for the platform and one per team (`ChaosLever`, a row per scope,
database-backed so it holds across restarts of every process). Engaging, in one
transaction under the lever's row lock:

- marks it engaged, with who and why (audited `chaos.lever.engaged`);
- aborts every running experiment in scope (`chaos.experiment.aborted`, the lever named in
  the reason and the evidence) and revokes its lease: the holder no longer holds it, so a
  renewal fails and no injection can start under it (`chaos.lease.revoked`).

After the commit a change notice wakes each experiment's controller, which reverts its fault
at once (canary/chaos/controller.py); a controller that is dead leaves it to the reaper,
whose next pass reverts the fault of every ended experiment (canary/chaos/reaper.py): within
the reaper's period, inside the lease bound. Then the cluster-side Lease mirrors, where the
backend keeps them, are deleted: cluster writes happen after the commit, never under the lock.

Admission (`lever_require_released`) locks the same rows: an experiment being created and a
lever being engaged serialize, so none slips in between the engagement and its sweep.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from audit import record
from canary.chaos.models import (
    ChaosExperiment,
    ChaosLease,
    ChaosLever,
    ExperimentStatus,
    LeverScope,
)
from kiln import changes
from kiln.errors import Conflict, Forbidden, IllegalTransition, InvalidInput, NotFound
from kiln.identity.models import Team
from kiln.identity.permissions import Actor, can_operate_chaos_lever

log = logging.getLogger("kiln.chaos")

LEVER_NOTICE = "chaos.levers"  # announced on every engage and release


class LeverEngaged(Conflict):
    """An experiment refused because a safety lever covering it is engaged."""

    code = "chaos_lever_engaged"


def experiment_notice(experiment_id: Any) -> str:
    """The change-notice key of one experiment: its controller waits on it between renewals."""
    return f"chaos.experiment.{experiment_id}"


def lever_label(lever: ChaosLever) -> str:
    """`the platform lever` or `the lever of team payments`."""
    if lever.scope == LeverScope.PLATFORM:
        return "the platform lever"
    return f"the lever of team {lever.team.slug}"


def lever_summary(lever: ChaosLever) -> dict[str, Any]:
    """The lever as the 409, the API and the audit chain name it."""
    return {
        "scope": lever.scope,
        "team": lever.team.slug if lever.team_id else None,
        "engaged": lever.engaged,
        "engaged_by": lever.engaged_by,
        "engaged_reason": lever.engaged_reason,
        "engaged_at": lever.engaged_at.isoformat() if lever.engaged_at else None,
        "released_by": lever.released_by,
        "released_reason": lever.released_reason,
        "released_at": lever.released_at.isoformat() if lever.released_at else None,
    }


def _row(team: Team | None) -> ChaosLever:
    """The lever row of a scope, created on first use (a concurrent creation is read back)."""
    scope = LeverScope.TEAM if team is not None else LeverScope.PLATFORM
    lever = ChaosLever.objects.filter(scope=scope, team=team).first()
    if lever is not None:
        return lever
    try:
        with transaction.atomic():
            return ChaosLever.objects.create(scope=scope, team=team)
    except IntegrityError:
        return ChaosLever.objects.get(scope=scope, team=team)


def _locked(team: Team | None) -> ChaosLever:
    """The scope's lever row, locked until the caller's transaction ends."""
    row = _row(team)
    return ChaosLever.objects.select_for_update(of=("self",)).select_related("team").get(pk=row.pk)


def lever_require_released(*, team: Team) -> None:
    """Inside the caller's transaction: lock the platform's and the team's levers (in that
    order, as every caller does) and refuse with a 409 naming an engaged one."""
    for lever in (_locked(None), _locked(team)):
        if lever.engaged:
            raise LeverEngaged(
                f"{lever_label(lever)} is engaged by {lever.engaged_by}: {lever.engaged_reason}; "
                "no experiment starts until it is released",
                extra={"lever": lever_summary(lever)},
            )


def _team(team_slug: str | None) -> Team | None:
    if team_slug is None:
        return None
    team = Team.objects.filter(slug=team_slug).first()
    if team is None:
        raise NotFound("No such team.")
    return team


def _check(actor: Actor, team_slug: str | None, reason: Any, verb: str) -> str:
    """Who may move the lever and why: 403 naming the rule, 400 for a missing reason."""
    if not can_operate_chaos_lever(actor, team_slug):
        who = (
            "platform admins"
            if team_slug is None
            else f"engineers of team {team_slug} and platform admins"
        )
        scope = "the platform lever" if team_slug is None else f"the lever of team {team_slug}"
        raise Forbidden(f"Only {who} {verb} {scope}.", extra={"rule": "lever_permission"})
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput(
            f"Say why you {verb} the lever.", extra={"fields": {"reason": ["a reason is required"]}}
        )
    reason = reason.strip()
    if len(reason) > 300 or "\x00" in reason:
        raise InvalidInput(
            "The reason is too long.",
            extra={"fields": {"reason": ["at most 300 characters, no NUL"]}},
        )
    return reason


def lever_engage(*, actor: Actor, team_slug: str | None = None, reason: str) -> ChaosLever:
    """Engage the platform lever (team_slug None) or a team's: stop every experiment in scope,
    refuse new ones until released; audited. A lever already engaged is a 409 naming who."""
    reason = _check(actor, team_slug, reason, "engage")
    team = _team(team_slug)
    revoked: list[str] = []
    with transaction.atomic():
        lever = _locked(team)
        if lever.engaged:
            raise IllegalTransition(
                f"{lever_label(lever)} is already engaged by {lever.engaged_by}: "
                f"{lever.engaged_reason}",
                extra={"lever": lever_summary(lever)},
            )
        now = timezone.now()
        ChaosLever.objects.filter(pk=lever.pk).update(
            engaged=True,
            engaged_by=actor.username[:200],
            engaged_reason=reason,
            engaged_at=now,
        )
        lever.refresh_from_db()
        record(actor, "chaos.lever.engaged", lever, lever_summary(lever))
        revoked = _stop_in_scope(lever, team=team, actor=actor)
        changes.notify_after_commit(LEVER_NOTICE)
    _delete_lease_mirrors(revoked)
    return lever


def _stop_in_scope(lever: ChaosLever, *, team: Team | None, actor: Actor) -> list[str]:
    """Abort every running experiment in the lever's scope and revoke its lease, in the caller's
    transaction and in a few statements, whatever their number: leases locked first, then the
    experiments (the order every other writer takes them in). Returns the experiments' ids."""
    # Import here: services/experiments.py is imported by creation, which imports this module.
    from canary.chaos.services.experiments import _abort_locked

    scope = ChaosExperiment.objects.filter(status=ExperimentStatus.RUNNING)
    if team is not None:
        scope = scope.filter(team=team)
    ids = list(scope.values_list("pk", flat=True))
    leases = {
        lease.pk: lease
        for lease in ChaosLease.objects.select_for_update().filter(pk__in=ids).order_by("pk")
    }
    running = list(
        ChaosExperiment.objects.select_for_update(of=("self",))
        .select_related("team")
        .filter(pk__in=ids, status=ExperimentStatus.RUNNING)
        .order_by("created_at")
    )
    if not running:
        return []
    reason = f"{lever_label(lever)} engaged by {lever.engaged_by}: {lever.engaged_reason}"
    _abort_locked(running, actor=actor, reason=reason, evidence={"lever": lever_summary(lever)})
    held = [leases[exp.pk] for exp in running if exp.pk in leases and leases[exp.pk].holder]
    ChaosLease.objects.filter(pk__in=[lease.pk for lease in held]).update(
        holder="", renewed_at=None, resource_version=F("resource_version") + 1
    )
    by_id = {exp.pk: exp for exp in running}
    for lease in held:
        record(
            actor,
            "chaos.lease.revoked",
            by_id[lease.pk],
            {"holder": lease.holder, "term": lease.transitions, "by": lever_label(lever)},
        )
    return [str(exp.pk) for exp in running]


def _delete_lease_mirrors(experiment_ids: list[str]) -> None:
    """After the commit: remove the cluster-side Leases of revoked leases (where kept)."""
    if not experiment_ids:
        return
    from canary.chaos.services.leases import _cluster_lease

    for exp_id in experiment_ids:
        try:
            mirror = _cluster_lease(exp_id)
            if mirror is not None:
                mirror.delete()
        except Exception:  # noqa: BLE001 - an orphan Lease only names an ended experiment
            log.warning("could not delete the Kubernetes Lease of %s", exp_id, exc_info=True)


def lever_release(*, actor: Actor, team_slug: str | None = None, reason: str) -> ChaosLever:
    """Release an engaged lever: experiments may start again in its scope; audited."""
    reason = _check(actor, team_slug, reason, "release")
    team = _team(team_slug)
    with transaction.atomic():
        lever = _locked(team)
        if not lever.engaged:
            raise IllegalTransition(f"{lever_label(lever)} is not engaged")
        ChaosLever.objects.filter(pk=lever.pk).update(
            engaged=False,
            released_by=actor.username[:200],
            released_reason=reason,
            released_at=timezone.now(),
        )
        lever.refresh_from_db()
        record(actor, "chaos.lever.released", lever, lever_summary(lever))
        changes.notify_after_commit(LEVER_NOTICE)
    return lever
