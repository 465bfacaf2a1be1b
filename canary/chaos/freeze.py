"""An experiment under lease keeps Karpenter off its targets' nodes (scheduler.freezes).

While an experiment runs and its lease is held, the nodes its target pods (namespace +
selector) run on carry `karpenter.sh/do-not-disrupt`, or the experiment would measure
Karpenter. The controller calls `experiment_freeze_sync` on every pass while it holds
the lease, which renews the freeze (its lease is the experiment's: lease duration plus
the clock skew allowed) and follows the pods if they move; giving the lease up releases
them (`experiment_freeze_release`). A controller killed holding the lease renews nothing:
the chaos reaper's pass (and the scheduler's beat) releases the freeze once that lease
would have lapsed. The hard bound is the experiment's hard maximum duration.
"""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from canary.chaos.models import ChaosExperiment, ExperimentStatus
from kiln.cluster import DeliveryBackend, DeliveryError
from kiln.identity.permissions import system_actor
from scheduler.freezes import (
    FreezeChange,
    Holder,
    disruption_freeze_hold,
    disruption_freeze_release,
    holder_nodes,
)
from scheduler.models import FreezeHolder

log = logging.getLogger("kiln.chaos")

FREEZER = system_actor("chaos-controller")


def experiment_holder(exp: ChaosExperiment) -> Holder:
    """The experiment as the holder of its freezes, bounded by its hard maximum duration."""
    return Holder(
        kind=FreezeHolder.EXPERIMENT,
        id=str(exp.pk),
        label=exp.name,
        team=exp.team.slug,
        started_at=exp.started_at or timezone.now(),
        max_seconds=float(exp.max_duration_seconds),
        lease_seconds=float(exp.lease_duration) + float(exp.max_clock_skew),
    )


def experiment_freeze_sync(
    exp: ChaosExperiment, *, backend: DeliveryBackend
) -> FreezeChange | None:
    """Freeze the nodes of the running experiment's targets (the caller holds its lease).

    None when the experiment is not running or the cluster could not be reached (logged:
    the controller's next pass tries again).
    """
    if exp.status != ExperimentStatus.RUNNING:
        return None
    try:
        nodes = holder_nodes(backend, namespace=exp.namespace, selector=dict(exp.selector or {}))
        return disruption_freeze_hold(
            holder=experiment_holder(exp), nodes=nodes, actor=FREEZER, backend=backend
        )
    except DeliveryError:
        log.warning("could not freeze the target nodes of experiment %s", exp.pk, exc_info=True)
        return None


def experiment_freeze_release(
    experiment_id: Any, *, reason: str, backend: DeliveryBackend | None = None
) -> FreezeChange | None:
    """Release the experiment's freezes (its lease was given up); None if the cluster failed."""
    try:
        return disruption_freeze_release(
            kind=FreezeHolder.EXPERIMENT,
            holder_id=str(experiment_id),
            reason=reason,
            actor=FREEZER,
            backend=backend,
        )
    except DeliveryError:
        log.warning("could not thaw the nodes of experiment %s", experiment_id, exc_info=True)
        return None
