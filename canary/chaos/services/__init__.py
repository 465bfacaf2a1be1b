"""Chaos writes: experiments, fault leases, injection and revert; every change audited.

- `experiments`: define, start, end and abort experiments.
- `leases`: acquire, renew and release the lease that holds an experiment's fault.
- `injection`: apply a fault under a lease term, and revert it.
- `backend`: the cluster backend the services write through.

The controller loop is canary/chaos/controller.py; the reaper, which reverts every fault
whose holder must have reverted, is canary/chaos/reaper.py.
"""

from canary.chaos.services.backend import delivery_backend
from canary.chaos.services.experiments import (
    CONTROLLER_TASK,
    MAX_HARD_SECONDS,
    STOP_CONDITION_KINDS,
    ChaosInvalid,
    current_timings,
    experiment_abort,
    experiment_create,
    experiment_end,
    experiment_errors,
)
from canary.chaos.services.injection import (
    FAULTS_INJECTED,
    FAULTS_REVERTED,
    fault_inject,
    fault_revert,
    fault_spec,
)
from canary.chaos.services.leases import (
    CONTROLLER,
    LeaseNotHeld,
    fault_lease_acquire,
    fault_lease_release,
    fault_lease_renew,
)

__all__ = [
    "CONTROLLER",
    "CONTROLLER_TASK",
    "FAULTS_INJECTED",
    "FAULTS_REVERTED",
    "MAX_HARD_SECONDS",
    "STOP_CONDITION_KINDS",
    "ChaosInvalid",
    "LeaseNotHeld",
    "current_timings",
    "delivery_backend",
    "experiment_abort",
    "experiment_create",
    "experiment_end",
    "experiment_errors",
    "fault_inject",
    "fault_lease_acquire",
    "fault_lease_release",
    "fault_lease_renew",
    "fault_revert",
    "fault_spec",
]
