"""Least privilege for background components: each system actor may do its job and nothing else."""

from __future__ import annotations

import inspect

import pytest
from django.contrib.auth import get_user_model

from audit.models import OutboxEvent
from canary.services.machine import JOB_DECISIONS
from kiln.errors import Forbidden
from kiln.identity import components, permissions
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import ENGINEER, Actor, system_actor
from portal.lifecycle import JOB_MOVES

TEAM = "payments"
STATES = (
    "SUBMITTED",
    "DENIED",
    "PENDING_APPROVAL",
    "APPROVED",
    "REJECTED",
    "PROVISIONING",
    "READY",
    "SLEEPING",
    "WAKING",
    "EXPIRING",
    "TEARING_DOWN",
    "DELETED",
    "FAILED",
    "QUARANTINED",
)

# predicate -> (how to call it, the components it allows). Every other component is refused.
# A predicate added to kiln.identity.permissions without a row here fails
# test_every_predicate_has_a_row, so no new permission escapes this table.
EXPECTED: dict[str, tuple] = {
    "has_any_role": (lambda p, a: p(a), set()),
    "has_role": (lambda p, a: p(a, *permissions.ROLES), set()),
    "is_member": (lambda p, a: p(a, TEAM), set()),
    "can_view_audit": (lambda p, a: p(a), {"audit-verifier"}),
    "can_administer": (lambda p, a: p(a), set()),
    "can_use_admin": (lambda p, a: p(a, is_staff=True), set()),
    "can_see_all_teams": (lambda p, a: p(a), set()),
    "can_manage_teams": (
        lambda p, a: p(a),
        {"seed", "provision-bench", "canary-bench", "chaos-bench", "load-test"},
    ),
    "can_run_chaos": (lambda p, a: p(a, TEAM), {"chaos-bench"}),
    "can_view_chaos": (
        lambda p, a: p(a, TEAM),
        {"chaos-bench", "chaos-controller", "chaos-reaper"},
    ),
    "can_control_chaos": (lambda p, a: p(a), {"chaos-controller"}),
    # Safety levers are moved by people: no component engages or releases one.
    "can_operate_chaos_lever": (lambda p, a: p(a, TEAM), set()),
    "can_revert_fault": (
        lambda p, a: p(a, TEAM),
        {"chaos-bench", "chaos-controller", "chaos-reaper"},
    ),
    "can_request_environment": (lambda p, a: p(a, TEAM), set()),
    "can_act_on_environment": (lambda p, a: p(a, TEAM), set()),
    "can_tear_down_environment": (lambda p, a: p(a, TEAM), {"reaper"}),
    "can_view_environment": (
        lambda p, a: p(a, TEAM),
        {"policy-gate", "auto-approval", "provisioner", "reaper"},
    ),
    # Sleeping and waking: the owning team, and the components whose job it is.
    "can_sleep_environment": (lambda p, a: p(a, TEAM), {"sleeper", "budget-keeper"}),
    "can_set_sleep_schedule": (lambda p, a: p(a, TEAM), set()),
    "can_approve": (lambda p, a: p(a, TEAM, "someone-else"), set()),
    # Cluster nodes and pods are read by people (the scheduler API); no component asks.
    "can_view_node": (lambda p, a: p(a, environment="env_1", team=TEAM), set()),
    "can_view_pod": (lambda p, a: p(a, team=TEAM), set()),
    "can_manage_rollout": (lambda p, a: p(a, TEAM), {"seed", "canary-bench"}),
    "can_analyze_rollout": (lambda p, a: p(a), {"canary-analyzer"}),
    "can_decide_rollout": (
        lambda p, a: p(a, "step_advanced", decisions=JOB_DECISIONS),
        {"canary-analyzer"},
    ),
    "can_promote_rollout": (lambda p, a: p(a, TEAM), set()),
    "can_view_rollout": (lambda p, a: p(a, TEAM), {"canary-analyzer", "seed", "canary-bench"}),
    "can_record_audit": (lambda p, a: p(a), set(components.COMPONENTS)),
    "can_append_chain": (lambda p, a: p(a), {"audit-writer"}),
    "can_store_verification": (lambda p, a: p(a), {"audit-verifier"}),
    "can_set_up_audit": (lambda p, a: p(a), {"audit-setup"}),
    "can_store_cosignature": (lambda p, a: p(a), {"witness-intake"}),
    "can_provision_users": (lambda p, a: p(a), {"identity"}),
    "can_sync_nodes": (lambda p, a: p(a), {"scheduler-node-sync", "seed"}),
    "can_seed_pricing": (lambda p, a: p(a), {"seed"}),
    "can_store_replay": (lambda p, a: p(a), {"scheduler-replay"}),
    "can_seed_demo": (lambda p, a: p(a), {"seed"}),
    # Budgets are set and raised by platform admins; no component does either.
    "can_set_budget": (lambda p, a: p(a), set()),
    # Karpenter is kept off the nodes Kiln's own work runs on: the analyzer holds a freeze for a
    # rollout under analysis, the chaos controller for an experiment under lease.
    "can_hold_disruption_freeze": (lambda p, a: p(a), {"canary-analyzer", "chaos-controller"}),
    # A freeze whose holder is gone is released by whoever makes the nodes match (the node sync,
    # and the seed, which syncs nodes too) and by the chaos reaper.
    "can_reap_disruption_freezes": (
        lambda p, a: p(a),
        {"scheduler-node-sync", "seed", "chaos-reaper"},
    ),
}
# Whose job each lifecycle move is (can_move_environment, per target state).
MOVES = {
    "policy-gate": {"DENIED", "PENDING_APPROVAL", "FAILED"},
    "auto-approval": {"APPROVED"},
    "provisioner": {"PROVISIONING", "READY", "FAILED"},
    "reaper": {"EXPIRING", "TEARING_DOWN", "DELETED", "QUARANTINED", "FAILED"},
    "sleeper": {"SLEEPING", "WAKING", "READY", "FAILED"},
    "budget-keeper": {"SLEEPING", "WAKING", "READY", "FAILED"},
}

PREDICATE_NAMES = sorted(EXPECTED)
COMPONENT_NAMES = sorted(components.COMPONENTS)


def predicates_in_module() -> set[str]:
    """Every public predicate of kiln.identity.permissions (it returns bool and takes an actor)."""
    found = set()
    for name, fn in inspect.getmembers(permissions, inspect.isfunction):
        if fn.__module__ != permissions.__name__ or name.startswith("_"):
            continue
        params = list(inspect.signature(fn).parameters)
        if params[:1] == ["actor"] and inspect.signature(fn).return_annotation in (bool, "bool"):
            found.add(name)
    return found


def test_every_predicate_has_a_row():
    assert predicates_in_module() == set(EXPECTED) | {"can_move_environment"}


@pytest.mark.parametrize("component", COMPONENT_NAMES)
@pytest.mark.parametrize("predicate", PREDICATE_NAMES)
def test_a_component_is_allowed_only_what_its_job_needs(component, predicate):
    call, allowed = EXPECTED[predicate]
    assert call(getattr(permissions, predicate), system_actor(component)) is (component in allowed)


@pytest.mark.parametrize("component", COMPONENT_NAMES)
@pytest.mark.parametrize("state", STATES)
def test_a_component_moves_environments_only_to_the_states_of_its_job(component, state):
    allowed = state in MOVES.get(component, set())
    actor = system_actor(component)
    assert permissions.can_move_environment(actor, state, moves=JOB_MOVES) is allowed


def test_people_pass_the_lifecycle_check_because_their_services_ask_their_own_predicates():
    person = Actor(username="alice", roles=frozenset({ENGINEER}), teams=frozenset({TEAM}))
    assert all(permissions.can_move_environment(person, s, moves=JOB_MOVES) for s in STATES)


@pytest.mark.parametrize("component", COMPONENT_NAMES)
def test_a_system_actor_holds_no_role_and_no_team(component):
    actor = system_actor(component)
    assert actor.username == f"system:{component}" and actor.is_system
    assert actor.roles == frozenset() and actor.teams == frozenset()
    assert actor.capabilities == components.COMPONENTS[component]
    assert components.AUDIT_RECORD in actor.capabilities


def test_an_unknown_component_is_refused():
    with pytest.raises(ValueError, match="unknown system component 'janitor'"):
        system_actor("janitor")


def test_a_person_holding_capabilities_gets_nothing_from_them():
    """Capabilities count for system actors only; a person is judged by roles and teams."""
    forged = Actor(username="mallory", capabilities=frozenset(components.CAPABILITIES))
    assert not permissions.can_tear_down_environment(forged, TEAM)
    assert not permissions.can_analyze_rollout(forged)
    assert not permissions.can_manage_teams(forged)


# --- the services refuse a component outside its job, and change nothing --------------------


@pytest.fixture
def environment(db):
    from portal.services.requests import environment_request_submit

    team = Team.objects.create(slug=TEAM, name="Payments")
    user = get_user_model().objects.create_user("alice")
    Membership.objects.create(user=user, team=team)
    alice = Actor(
        username="alice", roles=frozenset({ENGINEER}), teams=frozenset({TEAM}), user_id=user.pk
    )
    data = {
        "team": TEAM,
        "name": "checkout",
        "env_class": "staging",
        "ttl_hours": 24,
        "workload_class": "standard",
        "cpu": 2,
        "memory_gib": 4,
        "gpu": 0,
        "tenant_control_plane": False,
        "spot_node_pool": False,
        "database": False,
        "justification": "release test",
    }
    env, _ = environment_request_submit(actor=alice, data=data)
    assert env.status == "PENDING_APPROVAL"
    return env


def unchanged(env) -> tuple:
    env.refresh_from_db()
    return env.status, OutboxEvent.objects.count()


@pytest.mark.parametrize("component", COMPONENT_NAMES)
def test_no_component_approves_a_request(environment, component):
    from portal.services.approvals import environment_approve

    before = unchanged(environment)
    with pytest.raises(Forbidden):
        environment_approve(actor=system_actor(component), environment=environment)
    assert unchanged(environment) == before


@pytest.mark.parametrize(
    "component",
    [n for n in COMPONENT_NAMES if n not in ("auto-approval",)],
)
def test_only_auto_approval_moves_a_request_to_approved(environment, component):
    from portal.services.lifecycle import environment_transition

    before = unchanged(environment)
    with pytest.raises(Forbidden, match="may not move an environment to APPROVED"):
        environment_transition(
            actor=system_actor(component), environment=environment, to="APPROVED"
        )
    assert unchanged(environment) == before


def ready(environment):
    from portal.services.lifecycle import environment_transition

    environment_transition(
        actor=system_actor("auto-approval"), environment=environment, to="APPROVED"
    )
    provisioner = system_actor("provisioner")
    environment_transition(actor=provisioner, environment=environment, to="PROVISIONING")
    return environment_transition(actor=provisioner, environment=environment, to="READY")


@pytest.mark.parametrize(
    "component", ["canary-analyzer", "scheduler-node-sync", "audit-writer", "provisioner"]
)
def test_components_outside_teardown_cannot_expire_extend_or_tear_down(environment, component):
    from portal.services.expiry import environment_extend
    from portal.services.lifecycle import environment_transition
    from portal.services.teardown import environment_teardown_request

    env = ready(environment)
    actor = system_actor(component)
    before = unchanged(env)
    with pytest.raises(Forbidden):
        environment_teardown_request(actor=actor, environment=env)
    with pytest.raises(Forbidden):
        environment_extend(actor=actor, environment=env, hours=1)
    with pytest.raises(Forbidden):
        environment_transition(actor=actor, environment=env, to="EXPIRING")
    assert unchanged(env) == before


def test_the_reaper_expires_a_ready_environment_but_cannot_extend_it(environment):
    from portal.services.expiry import environment_extend
    from portal.services.lifecycle import environment_transition

    env = ready(environment)
    reaper = system_actor("reaper")
    with pytest.raises(Forbidden):
        environment_extend(actor=reaper, environment=env, hours=1)
    env = environment_transition(actor=reaper, environment=env, to="EXPIRING")
    assert env.status == "EXPIRING"
    assert OutboxEvent.objects.filter(actor="system:reaper").count() == 1


@pytest.mark.parametrize(
    "component", [n for n in COMPONENT_NAMES if n not in ("seed", "canary-bench")]
)
def test_only_the_seed_and_the_canary_bench_register_services(db, component):
    from canary.models import Service
    from canary.services import service_create

    team = Team.objects.create(slug=TEAM, name="Payments")
    with pytest.raises(Forbidden):
        service_create(
            actor=system_actor(component), team=team, name="web", namespace="payments-dev"
        )
    assert not Service.objects.exists()
    assert not OutboxEvent.objects.exists()
