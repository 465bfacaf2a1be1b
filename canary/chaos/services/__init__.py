"""Chaos writes: experiments, fault leases, injection and revert; every change audited.

- `experiments`: validate, start, end and abort experiments.
- `creation`: create one, once per Idempotency-Key, if `admission` lets it in (no engaged
  lever, no overlapping experiment).
- `levers`: the safety levers, platform-wide and per team.
- `leases`: acquire, renew and release the lease that holds an experiment's fault.
- `injection`: apply a fault under a lease term, and revert it.
- `backend`: the cluster backend the services write through.

The controller loop is canary/chaos/controller.py; the reaper, which reverts every fault
whose holder must have reverted, is canary/chaos/reaper.py.
"""

from canary.chaos.services.admission import ExperimentOverlaps, IdempotencyKeyReused
from canary.chaos.services.backend import delivery_backend
from canary.chaos.services.creation import experiment_create, experiment_submit
from canary.chaos.services.experiments import (
    CONTROLLER_TASK,
    MAX_HARD_SECONDS,
    STOP_CONDITION_KINDS,
    ChaosInvalid,
    controllers_resume,
    current_timings,
    experiment_abort,
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
from canary.chaos.services.levers import (
    LEVER_NOTICE,
    LeverEngaged,
    experiment_notice,
    lever_engage,
    lever_release,
    lever_summary,
)

__all__ = [
    "LEVER_NOTICE",
    "CONTROLLER",
    "CONTROLLER_TASK",
    "FAULTS_INJECTED",
    "FAULTS_REVERTED",
    "MAX_HARD_SECONDS",
    "STOP_CONDITION_KINDS",
    "ChaosInvalid",
    "ExperimentOverlaps",
    "IdempotencyKeyReused",
    "LeverEngaged",
    "LeaseNotHeld",
    "controllers_resume",
    "current_timings",
    "delivery_backend",
    "experiment_abort",
    "experiment_create",
    "experiment_end",
    "experiment_errors",
    "experiment_notice",
    "experiment_submit",
    "fault_inject",
    "fault_lease_acquire",
    "fault_lease_release",
    "fault_lease_renew",
    "fault_revert",
    "fault_spec",
    "lever_engage",
    "lever_release",
    "lever_summary",
]
