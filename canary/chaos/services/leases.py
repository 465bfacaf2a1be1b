"""Fault leases: acquire (compare-and-swap on the fencing token), renew, release; audited.

The arithmetic (when a lease lapses, when a holder must stop) is canary/chaos/leases.py.
`fault_lease_acquire` succeeds only when the lease is free, or lapsed for longer than
lease_duration + max_clock_skew. Each acquisition starts a new term
(`ChaosLease.transitions`), the fencing token every injection carries;
`fault_lease_renew` is a conditional update on (holder, term). On the kubernetes
backend that keeps one (Kubernetes: a `coordination.k8s.io/v1` Lease) each write is
mirrored to the cluster with optimistic concurrency, with no cluster call under the row lock
the update holds: the Lease is read first (one naming another holder refuses the term before
any write), and written after the database write commits; a conflict or a failure there
lapses the term (`chaos.lease.revoked`), so the holder stops and the reaper takes back any
fault of that term. A release deletes the Lease only while it names the releasing holder. After an acquisition or a renewal commits, the nodes of the experiment's
targets are frozen against disruption for as long as the lease holds
(`canary.chaos.freeze`); a release thaws them.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from audit import record
from canary.chaos.freeze import experiment_freeze_release, experiment_freeze_sync
from canary.chaos.leases import is_expired, may_acquire
from canary.chaos.models import ChaosExperiment, ChaosLease
from canary.chaos.selectors import timings_of
from canary.chaos.services.backend import delivery_backend
from kiln.cluster import LeaseConflict, LeaseMirror
from kiln.errors import Conflict, Forbidden
from kiln.identity.permissions import Actor, can_control_chaos, system_actor

log = logging.getLogger("kiln.chaos")

CONTROLLER = system_actor("chaos-controller")
ExperimentId = uuid.UUID | str


class LeaseNotHeld(Conflict):
    """The caller does not (or no longer) hold the experiment's lease."""

    code = "lease_not_held"


def _require_control(actor: Actor) -> None:
    """Leases and injection are the chaos controller's job alone (`chaos.control`)."""
    if not can_control_chaos(actor):
        raise Forbidden(f"{actor} may not hold chaos leases or inject faults")


def _cluster_lease(exp_id: ExperimentId) -> LeaseMirror | None:
    """The cluster-side Lease mirroring the database lease, where the backend keeps one."""
    return delivery_backend().lease_mirror(
        namespace=settings.KILN_CHAOS_LEASE_NAMESPACE, name=f"kiln-chaos-{exp_id}"
    )


def _cluster_refuses(experiment_id: ExperimentId, *allowed: str) -> bool:
    """True if the cluster's Lease (where the backend keeps one) names a holder other than
    `allowed` or no one: read before any database write, so a Lease held elsewhere refuses
    the term without a write to take back."""
    kube = _cluster_lease(experiment_id)
    return kube is not None and kube.holder() not in ("", *allowed)


def _mirror(
    experiment_id: ExperimentId,
    *,
    holder: str,
    term: int,
    lease_duration: float,
    acquired_at: datetime,
    now: datetime,
    expected_holder: str | None,
    actor: Actor,
) -> bool:
    """After the commit, write the cluster-side Lease where the backend keeps one; True if it
    holds `holder`'s term (or there is none). A conflict gives the term up and answers False; any
    other failure gives it up and is raised."""
    kube = _cluster_lease(experiment_id)
    if kube is None:
        return True
    try:
        kube.write(
            holder=holder,
            lease_duration=lease_duration,
            acquire_time=acquired_at,
            renew_time=now,
            transitions=term,
            expected_holder=expected_holder,
        )
    except LeaseConflict as exc:
        _give_up(experiment_id, holder=holder, term=term, why=str(exc), actor=actor)
        return False
    except Exception as exc:
        _give_up(experiment_id, holder=holder, term=term, why=str(exc), actor=actor)
        raise
    return True


def _give_up(
    experiment_id: ExperimentId, *, holder: str, term: int, why: str, actor: Actor
) -> None:
    """The cluster's Lease refused `holder`'s term: lapse it in the database too (audited), so
    no injection starts under it and the reaper reverts any fault it applied. The holder stays
    named: the next acquirer expects the cluster's Lease to name it, or no one."""
    with transaction.atomic():
        ended = ChaosLease.objects.filter(pk=experiment_id, holder=holder, transitions=term).update(
            renewed_at=None, resource_version=F("resource_version") + 1
        )
        if ended:
            record(
                actor,
                "chaos.lease.revoked",
                ChaosExperiment.objects.get(pk=experiment_id),
                {"holder": holder, "term": term, "by": "the cluster's Lease", "reason": why[:300]},
            )


def fault_lease_acquire(
    *,
    experiment_id: ExperimentId,
    holder: str,
    now: datetime | None = None,
    actor: Actor = CONTROLLER,
) -> int | None:
    """Take the lease if free or lapsed (CAS on resource_version); returns the new term or None."""
    _require_control(actor)
    now = now or timezone.now()
    exp = ChaosExperiment.objects.select_related("team").get(pk=experiment_id)
    timings = timings_of(exp)
    lease = ChaosLease.objects.get(pk=experiment_id)
    if lease.holder and lease.holder != holder and not is_expired(lease.renewed_at, now, timings):
        return None
    if not may_acquire(lease.holder, lease.renewed_at, holder, now, timings):
        return None
    if _cluster_refuses(experiment_id, lease.holder, holder):
        return None
    term = lease.transitions + 1
    with transaction.atomic():
        won = ChaosLease.objects.filter(
            pk=experiment_id, resource_version=lease.resource_version
        ).update(
            holder=holder,
            resource_version=F("resource_version") + 1,
            acquired_at=now,
            renewed_at=now,
            renewals=0,
            transitions=term,
        )
        if not won:
            return None
        record(
            actor,
            "chaos.lease.acquired",
            exp,
            {"holder": holder, "previous_holder": lease.holder, "term": term},
        )
    mirrored = _mirror(
        experiment_id,
        holder=holder,
        term=term,
        lease_duration=timings.lease_duration,
        acquired_at=now,
        now=now,
        expected_holder=lease.holder,  # "" too: a Lease someone else took since is refused
        actor=actor,
    )
    if not mirrored:
        return None
    exp.refresh_from_db()
    experiment_freeze_sync(exp, backend=delivery_backend())
    return term


def fault_lease_renew(
    *,
    experiment_id: ExperimentId,
    holder: str,
    term: int,
    now: datetime | None = None,
    actor: Actor = CONTROLLER,
) -> bool:
    """Renew the lease if `holder` still holds term `term`; False once it is lost (a term the
    cluster's Lease refused stays lost: its `renewed_at` is cleared)."""
    _require_control(actor)
    now = now or timezone.now()
    if _cluster_refuses(experiment_id, holder):
        return False
    with transaction.atomic():
        won = ChaosLease.objects.filter(
            pk=experiment_id, holder=holder, transitions=term, renewed_at__isnull=False
        ).update(
            renewed_at=now, renewals=F("renewals") + 1, resource_version=F("resource_version") + 1
        )
        if not won:
            return False
    experiment = ChaosExperiment.objects.select_related("team").get(pk=experiment_id)
    acquired_at = ChaosLease.objects.values_list("acquired_at", flat=True).get(pk=experiment_id)
    mirrored = _mirror(
        experiment_id,
        holder=holder,
        term=term,
        lease_duration=experiment.lease_duration,
        acquired_at=acquired_at or now,
        now=now,
        expected_holder=holder,
        actor=actor,
    )
    if not mirrored:
        return False
    # Renewed: the freeze of the targets' nodes is renewed with it, after the commit.
    experiment_freeze_sync(experiment, backend=delivery_backend())
    return True


def fault_lease_release(
    *, experiment_id: ExperimentId, holder: str, term: int, actor: Actor = CONTROLLER
) -> bool:
    """Give the lease up (after reverting); audited. False if it was not held."""
    _require_control(actor)
    with transaction.atomic():
        won = ChaosLease.objects.filter(pk=experiment_id, holder=holder, transitions=term).update(
            holder="", renewed_at=None, resource_version=F("resource_version") + 1
        )
        if not won:
            return False
        exp = ChaosExperiment.objects.get(pk=experiment_id)
        record(
            actor,
            "chaos.lease.released",
            exp,
            {"holder": holder, "term": term},
        )
    kube = _cluster_lease(experiment_id)
    if kube is not None:
        try:
            # Only while it still names this holder: a term taken since the commit keeps its Lease.
            kube.delete(expected_holder=holder)
        except Exception:  # noqa: BLE001 - an orphan Lease only delays the next acquire
            log.warning("could not delete the Kubernetes Lease of %s", experiment_id)
    experiment_freeze_release(experiment_id, reason="lease released", backend=delivery_backend())
    return True
