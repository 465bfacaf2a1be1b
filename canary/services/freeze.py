"""A rollout under analysis keeps Karpenter off its canary's nodes (scheduler.freezes).

While a rollout is RUNNING its canary pods (the namespace's pods labelled `version:
<canary version>`, the DestinationRule's canary subset) must stay where they are, or the
analysis would measure a node being drained. `rollout_freeze_sync` freezes exactly the
nodes those pods run on (the freeze follows them if they move) or, once the rollout
stopped running, releases every freeze it holds. It runs when a rollout starts or stops
(after the tick or the person's decision commits) and, for every rollout, on the beat
(`rollouts_freeze_sync`, every `KILN_CANARY_FREEZE_SYNC_SECONDS`), which renews the
freezes of the running ones: a tick that only continues the analysis reads and writes
nothing more. A failure to reach the cluster is logged and the next pass tries again; a
freeze nobody renews (Kiln stopped) lapses after `lease_seconds` and the scheduler's beat
reaps it.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db.models import Q

from canary.models import Rollout, RolloutStatus
from kiln.cluster import DeliveryBackend, DeliveryError
from kiln.cluster.backends import get_backend
from kiln.identity.permissions import system_actor
from scheduler.freezes import (
    FreezeChange,
    Holder,
    disruption_freeze_hold,
    disruption_freeze_release,
    holder_nodes,
)
from scheduler.models import DisruptionFreeze, FreezeHolder

log = logging.getLogger("kiln.canary")

FREEZER = system_actor("canary-analyzer")
# A rollout's freeze outlives its last renewal by three renewal periods (beat passes or ticks,
# whichever is longer), and at least MIN_LEASE_SECONDS.
LEASE_PERIODS = 3
MIN_LEASE_SECONDS = 30.0


def rollout_holder(rollout: Rollout) -> Holder:
    """The rollout as the holder of its freezes, bounded from its creation."""
    service = rollout.service
    return Holder(
        kind=FreezeHolder.ROLLOUT,
        id=str(rollout.pk),
        label=f"{service} {rollout.baseline_version} -> {rollout.canary_version}",
        team=service.team.slug,
        started_at=rollout.created_at,
        max_seconds=float("inf"),  # the platform's bound (KILN_DISRUPTION_FREEZE_MAX_SECONDS)
        lease_seconds=max(
            LEASE_PERIODS * float(rollout.tick_seconds),
            LEASE_PERIODS * float(settings.KILN_CANARY_FREEZE_SYNC_SECONDS),
            MIN_LEASE_SECONDS,
        ),
    )


def rollout_freeze_sync(
    rollout: Rollout, *, backend: DeliveryBackend | None = None
) -> FreezeChange | None:
    """Freeze the canary's nodes while the rollout runs, release them once it does not.

    `rollout` as just saved, with its service and team. Call it after the transaction that
    moved the rollout commits: it reads and writes the cluster. None when the cluster could
    not be reached.
    """
    try:
        if rollout.status != RolloutStatus.RUNNING:
            return disruption_freeze_release(
                kind=FreezeHolder.ROLLOUT,
                holder_id=str(rollout.pk),
                reason=f"rollout {rollout.status}",
                actor=FREEZER,
                backend=backend,
            )
        backend = backend or get_backend()
        nodes = holder_nodes(
            backend,
            namespace=rollout.service.namespace,
            selector={"version": rollout.canary_version},
        )
        return disruption_freeze_hold(
            holder=rollout_holder(rollout), nodes=nodes, actor=FREEZER, backend=backend
        )
    except DeliveryError:
        log.warning("could not freeze the canary nodes of rollout %s", rollout.pk, exc_info=True)
        return None


def rollouts_freeze_sync(*, backend: DeliveryBackend | None = None) -> int:
    """The beat's pass: renew the freezes of every running rollout, release those of every
    rollout that stopped; returns how many rollouts it synced."""
    backend = backend or get_backend()
    running = Rollout.objects.filter(status=RolloutStatus.RUNNING)
    holding = DisruptionFreeze.objects.filter(
        holder_kind=FreezeHolder.ROLLOUT, released_at__isnull=True
    ).values_list("holder_id", flat=True)
    rollouts = Rollout.objects.select_related("service__team").filter(
        Q(pk__in=running.values("pk")) | Q(pk__in=list(holding))
    )
    count = 0
    for rollout in rollouts.order_by("created_at"):
        rollout_freeze_sync(rollout, backend=backend)
        count += 1
    return count
