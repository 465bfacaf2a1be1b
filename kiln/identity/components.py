"""Kiln's background components and the capabilities each one's job needs (least privilege).

A system actor holds no role and belongs to no team: it is refused everything a
person's role grants. The predicates in kiln.identity.permissions allow it only
what its capabilities below name, so a bug in the reaper cannot approve a
request, register a service or inject a fault. Nothing here grants approval
(separation of duties is for people) or administration.
"""

from __future__ import annotations

# --- capabilities (one per job, `<subject>.<verb>`) ----------------------------------------

AUDIT_RECORD = "audit.record"  # write its own audit events (every component)
AUDIT_CHAIN = "audit.chain"  # append outbox events to the hash chain, sign checkpoints
AUDIT_VERIFY = "audit.verify"  # read the chain to verify it, store the outcome
AUDIT_SETUP = "audit.setup"  # create the database roles of the chain
AUDIT_COSIGN = "audit.cosign"  # store a witness cosignature once it verifies
USERS_PROVISION = "users.provision"  # users from token subjects, claim memberships
ENV_POLICY = "environment.policy"  # SUBMITTED -> DENIED | PENDING_APPROVAL; manifests -> FAILED
ENV_AUTO_APPROVE = "environment.auto-approve"  # PENDING_APPROVAL -> APPROVED when policy says so
ENV_PROVISION = "environment.provision"  # APPROVED -> PROVISIONING -> READY, or FAILED
ENV_TEARDOWN = "environment.teardown"  # READY -> EXPIRING -> TEARING_DOWN -> DELETED | QUARANTINED
ENV_SLEEP = "environment.sleep"  # READY -> SLEEPING -> WAKING -> READY (or FAILED)
ROLLOUT_ANALYZE = "rollout.analyze"  # decide a rollout from its metrics: step, promote, roll back
ROLLOUT_MANAGE = "rollout.manage"  # register services, start rollouts (demo seed, benchmarks)
CHAOS_CONTROL = "chaos.control"  # hold leases, inject, revert and end experiments
CHAOS_REAP = "chaos.reap"  # revert faults whose lease lapsed, end overdue experiments
CHAOS_RUN = "chaos.run"  # create and abort experiments (benchmarks)
NODES_SYNC = "nodes.sync"  # make the node inventory match the cluster
PRICING_SEED = "pricing.seed"  # load instance types and prices
REPLAY_STORE = "replay.store"  # store a trace replay's report
TEAMS_MANAGE = "teams.manage"  # create teams and grant memberships (demo seed, benchmarks)
DEMO_SEED = "demo.seed"  # create the demo people, teams and data

CAPABILITIES = frozenset(
    {
        AUDIT_RECORD,
        AUDIT_CHAIN,
        AUDIT_VERIFY,
        AUDIT_SETUP,
        AUDIT_COSIGN,
        USERS_PROVISION,
        ENV_POLICY,
        ENV_AUTO_APPROVE,
        ENV_PROVISION,
        ENV_TEARDOWN,
        ENV_SLEEP,
        ROLLOUT_ANALYZE,
        ROLLOUT_MANAGE,
        CHAOS_CONTROL,
        CHAOS_REAP,
        CHAOS_RUN,
        NODES_SYNC,
        PRICING_SEED,
        REPLAY_STORE,
        TEAMS_MANAGE,
        DEMO_SEED,
    }
)


def _job(*capabilities: str) -> frozenset[str]:
    return frozenset({AUDIT_RECORD, *capabilities})


# The component name is the actor's name (`system:<component>`) in every audit event.
COMPONENTS: dict[str, frozenset[str]] = {
    "identity": _job(USERS_PROVISION),
    "policy-gate": _job(ENV_POLICY),
    "auto-approval": _job(ENV_AUTO_APPROVE),
    "provisioner": _job(ENV_PROVISION),
    "reaper": _job(ENV_TEARDOWN),
    # Sleeps and wakes environments (inactivity, schedules, kubectl) and runs both pipelines.
    "sleeper": _job(ENV_SLEEP),
    # Tells teams of budget thresholds crossed; at the budget, puts idle environments to sleep.
    "budget-keeper": _job(ENV_SLEEP),
    "canary-analyzer": _job(ROLLOUT_ANALYZE),
    "chaos-controller": _job(CHAOS_CONTROL),
    "chaos-reaper": _job(CHAOS_REAP),
    "scheduler-node-sync": _job(NODES_SYNC),
    # The simulated cluster's Karpenter and kube-scheduler: they write only the cluster and audit.
    # The tenant audit sink: it only archives what a tenant API server posts, and audits that.
    "tenant-audit-sink": _job(),
    "karpenter": _job(),
    "kube-scheduler": _job(),
    "audit-writer": _job(AUDIT_CHAIN),
    "audit-verifier": _job(AUDIT_VERIFY),
    "audit-setup": _job(AUDIT_SETUP),
    # Takes the cosignatures witnesses post: stores one only after its signature verifies.
    "witness-intake": _job(AUDIT_COSIGN),
    "seed": _job(DEMO_SEED, TEAMS_MANAGE, PRICING_SEED, NODES_SYNC, ROLLOUT_MANAGE),
    "scheduler-replay": _job(REPLAY_STORE),
    "provision-bench": _job(TEAMS_MANAGE),
    "canary-bench": _job(TEAMS_MANAGE, ROLLOUT_MANAGE),
    "chaos-bench": _job(TEAMS_MANAGE, CHAOS_RUN),
    "load-test": _job(TEAMS_MANAGE),
}

assert all(caps <= CAPABILITIES for caps in COMPONENTS.values())  # noqa: S101 - a typo fails import


def capabilities_of(component: str) -> frozenset[str]:
    """The capabilities of a named component; an unknown name raises (no actor without a job)."""
    try:
        return COMPONENTS[component]
    except KeyError:
        raise ValueError(
            f"unknown system component {component!r}; components are {', '.join(sorted(COMPONENTS))}"
        ) from None
