"""Least privilege, enforced: every service a background component calls refuses it outside its job.

tests/kiln/test_system_actors.py checks the predicates; this calls the real services.
Each row of OPERATIONS names a service call and the capabilities that open it; the
components allowed are read from kiln.identity.components, so a new component is
covered by every row, and a capability no row (or ENFORCED_ELSEWHERE) covers fails
test_every_capability_is_enforced_somewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings

from audit import record
from audit.models import ChainEvent, Checkpoint, Cosignature, OutboxEvent, VerificationRun
from audit.services import (
    chain_append,
    checkpoint_create,
    cosignature_add,
    export_create,
    relay_publish,
    roles_setup,
    verification_run_store,
)
from audit.services.operations import verification_request
from audit.witness import WitnessState, cosigned_note, witness_verifier_key
from canary import services as canary_services
from canary.chaos.models import (
    ChaosExperiment,
    ChaosInjection,
    ChaosLease,
    ChaosLever,
    ExperimentStatus,
)
from canary.chaos.services import (
    experiment_abort,
    experiment_create,
    experiment_end,
    fault_inject,
    fault_lease_acquire,
    fault_lease_release,
    fault_lease_renew,
    fault_revert,
    lever_engage,
    lever_release,
)
from canary.models import Rollout, RolloutStatus, Service
from kiln.cluster.simulated import SimulatedBackend
from kiln.errors import Forbidden
from kiln.identity import components as c
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor, system_actor
from kiln.identity.services import membership_add, membership_remove, team_create
from scheduler import commitment
from scheduler import services as scheduler_services
from scheduler.freezes import Holder, disruption_freeze_hold, disruption_freezes_reap
from scheduler.models import CommitmentSample, DisruptionFreeze, Node, NodeSource, ReplayReport
from tests.audit.conftest import audit_settings  # noqa: F401 - own stream and key per test
from tests.canary.test_ownership_support import own_namespace
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    backend,
    chaos_settings,
    engineer,
    shop,
)

pytestmark = pytest.mark.django_db

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
HOLDER = "controller-test"


@dataclass(frozen=True)
class Operation:
    """A service call a component might make, and the capabilities that open it."""

    capabilities: frozenset[str]
    setup: str  # the context fixture it needs
    call: Callable[[Actor, dict[str, Any]], Any]
    state: Callable[[dict[str, Any]], Any]  # what the call would change
    worked: Callable[[Any, dict[str, Any]], bool]
    audited: bool = True  # the call writes an audit event as the actor


def _observed(name: str) -> scheduler_services.ObservedNode:
    return scheduler_services.ObservedNode(
        name=name, allocatable_cpu_millis=4000, allocatable_memory_bytes=8 << 30
    )


REPORT = {
    "parts": "a",
    "seed": 1,
    "nodes": 2,
    "placements": 3,
    "latency_class_placements": 1,
    "runs": [],
}


def _freeze_holder() -> Holder:
    from django.utils import timezone

    return Holder(
        kind="experiment", id="e-1", label="e", team="payments", started_at=timezone.now(),
        max_seconds=60.0, lease_seconds=10.0,
    )  # fmt: skip


def _freezes(ctx):
    return sorted(DisruptionFreeze.objects.values_list("node", "released_at", "lifted_at"))


def _nodes(ctx):
    return sorted(Node.objects.values_list("name", "source"))


def _rollout_state(ctx):
    r = Rollout.objects.get(pk=ctx["rollout"].pk)
    return r.status, r.weight, r.decisions.count(), r.ticks.count()


def _lease(ctx):
    return tuple(
        ChaosLease.objects.filter(pk=ctx["exp"].pk).values_list(
            "holder", "transitions", "renewals", "resource_version"
        )[0]
    )


def _injections(ctx):
    return sorted(ChaosInjection.objects.values_list("pk", "state", "reverted_at"))


def _levers(ctx):
    return sorted(ChaosLever.objects.values_list("pk", "engaged", "engaged_by"))


def _experiments(ctx):
    return sorted(ChaosExperiment.objects.values_list("pk", "status"))


def _chain(ctx):
    return ChainEvent.objects.count(), OutboxEvent.objects.count()


def _stream_entry() -> list[tuple[str, bytes]]:
    """One audit event as the writer reads it from the topic."""
    record(ADMIN, "kiln.test.recorded", "kiln:test", {})
    relay_publish()
    client = redis.Redis.from_url(settings.REDIS_URL)
    [(entry_id, fields)] = client.xrange(settings.KILN_AUDIT_STREAM)
    client.close()
    return [(entry_id.decode(), fields[b"e"])]


OPERATIONS: dict[str, Operation] = {
    "scheduler.node_sync": Operation(
        frozenset({c.NODES_SYNC}),
        "plain",
        lambda a, ctx: scheduler_services.node_sync(
            actor=a, source=NodeSource.SIMULATED, observed=[_observed("n-1")]
        ),
        _nodes,
        lambda r, ctx: r.created == ["n-1"],
    ),
    "scheduler.freezes.disruption_freeze_hold": Operation(
        frozenset({c.ROLLOUT_ANALYZE, c.CHAOS_CONTROL}),
        "plain",
        lambda a, ctx: disruption_freeze_hold(
            holder=_freeze_holder(), nodes={"n-gone"}, actor=a, backend=SimulatedBackend()
        ),
        _freezes,
        lambda r, ctx: r.frozen == ["n-gone"],
    ),
    "scheduler.freezes.disruption_freezes_reap": Operation(
        frozenset({c.NODES_SYNC, c.CHAOS_REAP}),
        "plain",
        lambda a, ctx: disruption_freezes_reap(actor=a, backend=SimulatedBackend()),
        _freezes,
        lambda r, ctx: r.released == [] and r.cleared == [],
        audited=False,  # nothing to reap: a pass that changes nothing writes no event
    ),
    "scheduler.node_apply_event": Operation(
        frozenset({c.NODES_SYNC}),
        "plain",
        lambda a, ctx: scheduler_services.node_apply_event(
            actor=a, source=NodeSource.KUBERNETES, event="ADDED", node=_observed("k-1")
        ),
        _nodes,
        lambda r, ctx: r.created == ["k-1"],
    ),
    "scheduler.commitment_sample_store": Operation(
        frozenset({c.NODES_SYNC}),
        "plain",
        lambda a, ctx: scheduler_services.commitment_sample_store(
            actor=a, figures=commitment.from_pods([("n-1", (1000, 1.0, 0))], []), nodes=1
        ),
        lambda ctx: CommitmentSample.objects.count(),
        lambda r, ctx: r is not None and CommitmentSample.objects.filter(pk=r.pk).exists(),
        audited=False,  # a sample is a metric, not an audit event
    ),
    "scheduler.replay_report_store": Operation(
        frozenset({c.REPLAY_STORE}),
        "plain",
        lambda a, ctx: scheduler_services.replay_report_store(actor=a, report=REPORT),
        lambda ctx: ReplayReport.objects.count(),
        lambda r, ctx: ReplayReport.objects.filter(pk=r.pk).exists(),
    ),
    "canary.service_create": Operation(
        frozenset({c.ROLLOUT_MANAGE}),
        "rollout",
        lambda a, ctx: canary_services.service_create(
            actor=a, team=ctx["team"], name="search-api", namespace="shop"
        ),
        lambda ctx: sorted(Service.objects.values_list("name", flat=True)),
        lambda r, ctx: r.name == "search-api",
    ),
    "canary.rollout_tick": Operation(
        frozenset({c.ROLLOUT_ANALYZE}),
        "rollout",
        lambda a, ctx: canary_services.rollout_tick(rollout_id=ctx["rollout"].pk, tick=0, actor=a),
        _rollout_state,
        lambda r, ctx: r == "started" and _rollout_state(ctx)[0] == RolloutStatus.RUNNING,
    ),
    "canary.rollout_create": Operation(
        frozenset({c.ROLLOUT_MANAGE}),
        "rollout",
        lambda a, ctx: canary_services.rollout_create(
            actor=a, service=ctx["idle_service"], baseline_version="v1", canary_version="v2"
        ),
        lambda ctx: Rollout.objects.count(),
        lambda r, ctx: r.status == RolloutStatus.PENDING,
    ),
    "canary.rollout_promote": Operation(
        frozenset(),  # a promotion by hand is a person's call: no component's job
        "rollout",
        lambda a, ctx: canary_services.rollout_promote(
            actor=a, rollout=ctx["rollout"], reason="test"
        ),
        _rollout_state,
        lambda r, ctx: False,
    ),
    "canary.rollout_abort": Operation(
        frozenset({c.ROLLOUT_MANAGE}),
        "rollout",
        lambda a, ctx: canary_services.rollout_abort(actor=a, rollout=ctx["rollout"]),
        _rollout_state,
        lambda r, ctx: r.status == RolloutStatus.ABORTED,
    ),
    "identity.team_create": Operation(
        frozenset({c.TEAMS_MANAGE}),
        "plain",
        lambda a, ctx: team_create(actor=a, slug="newteam", name="New team"),
        lambda ctx: sorted(Team.objects.values_list("slug", flat=True)),
        lambda r, ctx: r.slug == "newteam",
    ),
    "identity.membership_add": Operation(
        frozenset({c.TEAMS_MANAGE}),
        "members",
        lambda a, ctx: membership_add(actor=a, team=ctx["team"], username="mallory"),
        lambda ctx: sorted(Membership.objects.values_list("user__username", "team__slug")),
        lambda r, ctx: r.user.username == "mallory",
    ),
    "identity.membership_remove": Operation(
        frozenset({c.TEAMS_MANAGE}),
        "members",
        lambda a, ctx: membership_remove(actor=a, membership=ctx["membership"]),
        lambda ctx: sorted(Membership.objects.values_list("user__username", "team__slug")),
        lambda r, ctx: not Membership.objects.filter(pk=ctx["membership"].pk).exists(),
    ),
    "chaos.experiment_create": Operation(
        frozenset({c.CHAOS_RUN}),
        "chaos",
        # Another target than the setup's experiment: an overlap would be refused anyway.
        lambda a, ctx: experiment_create(
            actor=a,
            data=abort_data(name="second", selector={"app": "api"}, service="api"),
            backend=ctx["backend"],
        ),
        _experiments,
        lambda r, ctx: r.name == "second",
    ),
    "chaos.experiment_abort": Operation(
        frozenset({c.CHAOS_RUN}),
        "chaos",
        lambda a, ctx: experiment_abort(actor=a, experiment=ctx["exp"], backend=ctx["backend"]),
        _experiments,
        lambda r, ctx: r.status == ExperimentStatus.ABORTED,
    ),
    # Safety levers are moved by people only: every component is refused.
    "chaos.lever_engage": Operation(
        frozenset(),
        "chaos",
        lambda a, ctx: lever_engage(actor=a, team_slug="payments", reason="incident"),
        _levers,
        lambda r, ctx: r.engaged,
    ),
    "chaos.lever_release": Operation(
        frozenset(),
        "chaos",
        lambda a, ctx: lever_release(actor=a, team_slug=None, reason="over"),
        _levers,
        lambda r, ctx: not r.engaged,
    ),
    "chaos.fault_lease_acquire": Operation(
        frozenset({c.CHAOS_CONTROL}),
        "chaos",
        lambda a, ctx: fault_lease_acquire(experiment_id=ctx["exp"].pk, holder=HOLDER, actor=a),
        _lease,
        lambda r, ctx: r == 1,
    ),
    "chaos.fault_lease_renew": Operation(
        frozenset({c.CHAOS_CONTROL}),
        "leased",
        lambda a, ctx: fault_lease_renew(
            experiment_id=ctx["exp"].pk, holder=HOLDER, term=1, actor=a
        ),
        _lease,
        lambda r, ctx: r is True and _lease(ctx)[2] == 1,
        audited=False,  # a renewal is not an event (fault_lease_renew's docstring)
    ),
    "chaos.fault_lease_release": Operation(
        frozenset({c.CHAOS_CONTROL}),
        "leased",
        lambda a, ctx: fault_lease_release(
            experiment_id=ctx["exp"].pk, holder=HOLDER, term=1, actor=a
        ),
        _lease,
        lambda r, ctx: r is True and _lease(ctx)[0] == "",
    ),
    "chaos.fault_inject": Operation(
        frozenset({c.CHAOS_CONTROL}),
        "leased",
        lambda a, ctx: fault_inject(
            experiment_id=ctx["exp"].pk, holder=HOLDER, term=1, backend=ctx["backend"], actor=a
        ),
        _injections,
        lambda r, ctx: r.state == "active",
    ),
    "chaos.fault_revert": Operation(
        frozenset({c.CHAOS_CONTROL, c.CHAOS_REAP, c.CHAOS_RUN}),
        "injected",
        lambda a, ctx: fault_revert(
            injection_id=ctx["injection"].pk, actor=a, reason="test", backend=ctx["backend"]
        ),
        _injections,
        lambda r, ctx: r is True,
    ),
    "chaos.experiment_end": Operation(
        frozenset({c.CHAOS_CONTROL, c.CHAOS_REAP, c.CHAOS_RUN}),
        "chaos",
        lambda a, ctx: experiment_end(
            experiment_id=ctx["exp"].pk,
            to=ExperimentStatus.COMPLETED,
            actor=a,
            reason="test",
            backend=ctx["backend"],
        ),
        _experiments,
        lambda r, ctx: r is True,
    ),
    "audit.chain_append": Operation(
        frozenset({c.AUDIT_CHAIN}),
        "stream",
        lambda a, ctx: chain_append(messages=ctx["messages"], actor=a),
        _chain,
        lambda r, ctx: r.appended == 1,
        audited=False,  # the chain is what it appends to
    ),
    "audit.checkpoint_create": Operation(
        frozenset({c.AUDIT_CHAIN}),
        "chained",
        lambda a, ctx: checkpoint_create(actor=a),
        lambda ctx: Checkpoint.objects.count(),
        lambda r, ctx: r is not None and r.size == ChainEvent.objects.count(),
        audited=False,
    ),
    "audit.verification_run_store": Operation(
        frozenset({c.AUDIT_VERIFY}),
        "plain",
        lambda a, ctx: verification_run_store(
            started_at=ctx["now"],
            ok=True,
            checked=0,
            checkpoints=0,
            first_bad_seq=None,
            message="ok",
            actor=a,
        ),
        lambda ctx: VerificationRun.objects.count(),
        lambda r, ctx: r.ok,
    ),
    "audit.verification_request": Operation(
        frozenset({c.AUDIT_VERIFY}),
        "plain",
        lambda a, ctx: verification_request(actor=a),
        lambda ctx: OutboxEvent.objects.filter(action="audit.verification.requested").count(),
        lambda r, ctx: OutboxEvent.objects.filter(action="audit.verification.requested").exists(),
    ),
    "audit.export_create": Operation(
        frozenset({c.AUDIT_VERIFY}),
        "chained",
        lambda a, ctx: export_create(actor=a, since=None, until=None, fmt="json"),
        _chain,
        lambda r, ctx: r is not None and r.last_seq == ChainEvent.objects.count(),
    ),
    "audit.cosignature_add": Operation(
        frozenset({c.AUDIT_COSIGN}),
        "cosign",
        lambda a, ctx: cosignature_add(note=ctx["cosigned"], actor=a),
        lambda ctx: Cosignature.objects.count(),
        lambda r, ctx: r.stored == ["w1"] and Cosignature.objects.count() == 1,
    ),
    "audit.roles_setup": Operation(
        frozenset({c.AUDIT_SETUP}),
        "plain",
        # The command's default role names: the same roles tests/audit sets up.
        lambda a, ctx: roles_setup(writer_role="kiln_audit_writer", app_role="kiln_app", actor=a),
        lambda ctx: None,  # refused before any statement; the audit event is the change seen
        lambda r, ctx: bool(r),
    ),
}

# Capabilities whose services are enforced elsewhere, and where.
ENFORCED_ELSEWHERE = {
    c.AUDIT_RECORD: "every component: test_every_component_still_records_its_own_events below",
    c.ENV_POLICY: "portal.services.lifecycle (can_move_environment), tests/kiln/test_system_actors.py",
    c.ENV_AUTO_APPROVE: "portal.services.lifecycle, tests/kiln/test_system_actors.py",
    c.ENV_PROVISION: "portal.services.lifecycle, tests/kiln/test_system_actors.py",
    c.ENV_TEARDOWN: "portal.services.lifecycle, tests/kiln/test_system_actors.py",
    c.ENV_SLEEP: (
        "portal.services.sleep (can_sleep_environment) and portal.services.lifecycle, "
        "tests/kiln/test_system_actors.py and tests/portal/test_sleep.py"
    ),
    # Services that take no actor: they act as their one component and nothing else calls them.
    c.USERS_PROVISION: "kiln.identity.services user_from_claims acts as system:identity only",
    c.PRICING_SEED: "scheduler.seed acts as system:seed only",
    c.DEMO_SEED: "kiln.seed acts as system:seed only",
}


def allowed(op: Operation) -> set[str]:
    """The components whose job includes one of the operation's capabilities."""
    return {name for name, caps in c.COMPONENTS.items() if caps & op.capabilities}


CASES = [(op, comp) for op in OPERATIONS for comp in sorted(c.COMPONENTS)]


@pytest.fixture
def context(request, db, chaos_settings):  # noqa: F811
    """The rows an operation acts on, made by a person (or the controller for its own leases)."""
    from django.utils import timezone

    op = OPERATIONS[request.param]
    ctx: dict[str, Any] = {"now": timezone.now()}
    if op.setup in ("rollout", "chaos", "leased", "injected"):
        backend = ctx["backend"] = request.getfixturevalue("backend")
        request.getfixturevalue("shop")
        engineer = request.getfixturevalue("engineer")
    if op.setup == "rollout":
        team = Team.objects.get(slug="payments")
        own_namespace("shop", team.slug, backend)
        service = canary_services.service_create(
            actor=ADMIN, team=team, name="checkout", namespace="shop", sim_traffic_class="steady"
        )
        ctx["team"] = team
        ctx["rollout"] = canary_services.rollout_create(
            actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
        )
        ctx["idle_service"] = canary_services.service_create(
            actor=ADMIN, team=team, name="cart", namespace="shop", sim_traffic_class="steady"
        )
    if op.setup == "members":
        from django.contrib.auth import get_user_model

        ctx["team"] = Team.objects.create(slug="payments", name="Payments")
        users = get_user_model().objects
        users.create_user("mallory")
        ctx["membership"] = Membership.objects.create(
            user=users.create_user("trent"), team=ctx["team"], source="admin"
        )
    if op.setup in ("chaos", "leased", "injected"):
        ctx["exp"] = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    if op.setup in ("leased", "injected"):
        assert fault_lease_acquire(experiment_id=ctx["exp"].pk, holder=HOLDER) == 1
    if op.setup == "injected":
        ctx["injection"] = fault_inject(
            experiment_id=ctx["exp"].pk, holder=HOLDER, term=1, backend=backend
        )
    if op.setup in ("stream", "chained", "cosign"):
        ctx["messages"] = _stream_entry()
    if op.setup in ("chained", "cosign"):
        assert chain_append(messages=ctx["messages"]).appended == 1
    if op.setup == "cosign":
        key = Ed25519PrivateKey.generate()
        request.getfixturevalue("settings").KILN_AUDIT_WITNESSES = witness_verifier_key(
            "w1", key.public_key()
        )
        signed = checkpoint_create()
        ctx["cosigned"] = cosigned_note(
            WitnessState("", signed.size, b"", signed.note), "w1", key, 1
        )
    return ctx


def _events() -> list[tuple[str, str]]:
    return list(OutboxEvent.objects.order_by("id").values_list("actor", "action"))


REFUSED = [(o, k) for o, k in CASES if k not in allowed(OPERATIONS[o])]
ALLOWED = [(o, k) for o, k in CASES if k in allowed(OPERATIONS[o])]


@pytest.mark.parametrize(
    ("context", "component"), REFUSED, ids=[f"{o}-{k}" for o, k in REFUSED], indirect=["context"]
)
def test_each_service_refuses_a_component_outside_its_job_and_changes_nothing(
    context, component, request
):
    op = OPERATIONS[request.node.callspec.params["context"]]
    state, events = op.state(context), _events()
    with pytest.raises(Forbidden) as err:
        op.call(system_actor(component), context)
    assert err.value.http_status == 403
    assert op.state(context) == state
    assert _events() == events


@pytest.mark.parametrize(
    ("context", "component"), ALLOWED, ids=[f"{o}-{k}" for o, k in ALLOWED], indirect=["context"]
)
def test_each_service_still_works_for_the_components_whose_job_it_is(context, component, request):
    op = OPERATIONS[request.node.callspec.params["context"]]
    before = _events()
    result = op.call(system_actor(component), context)
    assert op.worked(result, context)
    new = _events()[len(before) :]
    if op.audited:
        assert f"system:{component}" in {actor for actor, _ in new}, new


def test_every_operation_is_someones_job_unless_it_is_for_people_only():
    assert all(allowed(op) or not op.capabilities for op in OPERATIONS.values())


# Services whose refusal is the same predicate as a row above (their setups need a rollout
# that is inconclusive or fed by pushes); the check below reads that each asks it.
SAME_PREDICATE_AS_A_ROW = {
    # The thaw and the cluster pass under a hold or a reap: either row's predicate opens them.
    "scheduler.freezes.disruption_freeze_release": "can_reap_disruption_freezes(actor",
    "scheduler.freezes.freezes_apply": "can_reap_disruption_freezes(actor",
    "canary.services.observations.observation_push": "can_manage_rollout(actor",
    "canary.services.registry.service_set_simulated_regression": "can_manage_rollout(actor",
    "canary.services.steering.rollout_extend": "can_manage_rollout(actor",
    "canary.services.steering.rollout_retry": "can_manage_rollout(actor",
    # Changes nothing: names a form's problems, the namespace one by experiment_create's predicate.
    "canary.chaos.services.experiments.experiment_errors": "can_run_chaos(actor",
    # experiment_create's own work, answering whether it created or replayed.
    "canary.chaos.services.creation.experiment_submit": "can_run_chaos(actor",
    # fault_revert's check again, for an injection whose revert is not yet confirmed.
    "canary.chaos.services.injection.fault_revert_recheck": "can_revert_fault(actor",
}
SERVICE_MODULES = (
    "scheduler.services",
    "scheduler.freezes",
    "canary.services.registry",
    "canary.services.rollouts",
    "canary.services.steering",
    "canary.services.observations",
    "canary.chaos.services.experiments",
    "canary.chaos.services.creation",
    "canary.chaos.services.levers",
    "canary.chaos.services.leases",
    "canary.chaos.services.injection",
    "audit.services.appending",
    "audit.services.operations",
    "audit.services.witnessing",
    "kiln.identity.services",
)


def test_every_service_that_takes_an_actor_has_a_row():
    import importlib
    import inspect

    rows = {name.split(".")[-1] for name in OPERATIONS}
    missing = []
    for module_name in SERVICE_MODULES:
        module = importlib.import_module(module_name)
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ != module_name or name.startswith("_"):
                continue
            if "actor" not in inspect.signature(fn).parameters:
                continue
            asks = SAME_PREDICATE_AS_A_ROW.get(f"{module_name}.{name}")
            if asks is not None:
                assert asks in inspect.getsource(fn), f"{module_name}.{name} no longer asks {asks})"
            elif name not in rows:
                missing.append(f"{module_name}.{name}")
    assert missing == []


def test_every_capability_is_enforced_somewhere():
    covered = set().union(*(op.capabilities for op in OPERATIONS.values()))
    assert covered | set(ENFORCED_ELSEWHERE) == set(c.CAPABILITIES)
    assert not covered & set(ENFORCED_ELSEWHERE)


@pytest.mark.parametrize("component", sorted(c.COMPONENTS))
def test_every_component_still_records_its_own_events(component):
    event_id = record(system_actor(component), "kiln.test.recorded", "kiln:test", {"n": 1})
    row = OutboxEvent.objects.get(event_id=event_id)
    assert (row.actor, row.action) == (f"system:{component}", "kiln.test.recorded")
