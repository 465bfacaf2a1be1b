"""The simulated cluster's scheduling: Karpenter, kube-scheduler, workload controllers and spot reclaims.

On a real cluster these are the cluster's own; on the simulated one
(`backend.simulates_scheduling`) Kiln runs them, through the cluster interface
only. `cluster_tick` is one round, run by the beat task `scheduler.tasks.cluster_tick`:

1. the demo's shared NodePools, control-plane pods and each new environment's
   demo workload (`demo`);
2. workload controllers: Deployments, StatefulSets and Jobs get pods (`workloads`);
3. kube-scheduler binds what fits, through Kiln's extender (`kubescheduler`);
4. Karpenter launches nodes for what stayed Unschedulable, and kube-scheduler
   runs again to bind onto them (`provisioner`);
5. spot reclaims at the price book's rates (`reclaims`);
6. Karpenter's disruption: expired nodes, and empty ones after consolidateAfter.

docs/scheduler.md, "The simulated cluster's scheduling", has the details.
"""

from __future__ import annotations

import random
from typing import Any

from django.conf import settings

from kiln.cluster import DeliveryBackend
from scheduler.simulation.demo import demo_cluster_reconcile
from scheduler.simulation.disruption import nodes_disrupt
from scheduler.simulation.kubescheduler import KubeScheduler
from scheduler.simulation.provisioner import nodes_provision
from scheduler.simulation.reclaims import spot_reclaims
from scheduler.simulation.workloads import workloads_reconcile

__all__ = ["cluster_tick"]


def cluster_tick(
    *,
    backend: DeliveryBackend,
    seconds: float,
    rng: random.Random | None = None,
    demo: bool | None = None,
) -> dict[str, Any]:
    """One round of the simulated cluster's controllers over `seconds`; {} where the cluster has its own."""
    if not backend.simulates_scheduling:
        return {}
    demo = settings.KILN_SIM_DEMO_WORKLOAD if demo is None else demo
    report: dict[str, Any] = {}
    if demo:
        report["demo"] = demo_cluster_reconcile(backend=backend, seed_workloads=True)
    report["workloads"] = len(workloads_reconcile(backend=backend).created)
    scheduler = KubeScheduler(
        backend=backend, node_cache_capable=settings.KILN_SIM_NODE_CACHE_CAPABLE
    )
    first = scheduler.run()
    plan = nodes_provision(backend=backend)
    second = scheduler.run() if plan.nodes else first
    report.update(
        bound=len(first.bound) + (len(second.bound) if second is not first else 0),
        unschedulable=len(second.unschedulable),
        launched=len(plan.nodes),
        reclaims=spot_reclaims(backend=backend, seconds=seconds, rng=rng),
        disrupted=nodes_disrupt(backend=backend),
    )
    return report
