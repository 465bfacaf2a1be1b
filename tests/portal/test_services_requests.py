"""Submitting, approving and rejecting requests: policy gate, idempotency, separation of duties."""

from __future__ import annotations

import pytest

from audit.models import OutboxEvent
from kiln.errors import Conflict, Forbidden, IllegalTransition, InvalidInput
from portal.lifecycle import TRANSITIONS, Status
from portal.models import ApprovalDecision, Environment, EnvironmentRequest, PolicyDecision
from portal.services import (
    AlreadyDecided,
    IdempotencyKeyReused,
    SelfApprovalForbidden,
    environment_approve,
    environment_reject,
    environment_request_submit,
    environment_transition,
)
from tests.portal.conftest import request_data

pytestmark = pytest.mark.django_db


def actions(env: Environment) -> list[str]:
    return list(
        OutboxEvent.objects.filter(target=f"portal.environment:{env.public_id}").values_list(
            "action", flat=True
        )
    )


def test_dev_request_is_auto_approved_and_provisioned_to_ready(
    people, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        env, created = environment_request_submit(actor=people["alice"], data=request_data())
    env.refresh_from_db()
    assert created
    assert env.status == Status.READY
    assert env.namespace == "payments-checkout"
    assert env.expires_at is not None
    assert actions(env)[:4] == [
        "portal.environment.submitted",
        "portal.environment.queued_for_approval",
        "portal.environment.approved",
        "portal.environment.provisioning_started",
    ]
    assert actions(env)[-1] == "portal.environment.readied"
    approved = OutboxEvent.objects.get(
        target=f"portal.environment:{env.public_id}", action="portal.environment.approved"
    )
    assert approved.actor == "system:auto-approval"
    assert approved.data["policy_version"] == env.policy_version and len(env.policy_version) == 64
    assert PolicyDecision.objects.filter(environment=env, stage="request", allowed=True).exists()
    assert PolicyDecision.objects.filter(environment=env, stage="manifest").count() >= 7


def test_staging_waits_for_an_approver(people):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging")
    )
    assert env.status == Status.PENDING_APPROVAL


def test_policy_denial_is_recorded_with_the_policy_version(people):
    env, created = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging", spot_node_pool=True)
    )
    assert created and env.status == Status.DENIED
    assert "spot node pools are for ephemeral and dev" in env.status_reason
    denied = OutboxEvent.objects.get(
        target=f"portal.environment:{env.public_id}", action="portal.environment.denied"
    )
    assert denied.actor == "system:policy-gate"
    assert denied.data["policy"]["denials"][0]["policy"] == "kiln-request-spot-classes"
    assert len(denied.data["policy"]["denials"][0]["sha256"]) == 64
    decision = PolicyDecision.objects.get(environment=env, allowed=False)
    assert decision.policy_sha256 and decision.policy_set_version == env.policy_version


def test_policy_timeout_denies_and_is_audited(people, settings, tmp_path):
    slow = (
        "[" + ",".join(["1"] * 80) + "].all(a, [" + ",".join(["1"] * 80) + "].all(b, a + b == 2))"
    )
    (tmp_path / "request").mkdir()
    (tmp_path / "request" / "slow.yaml").write_text(
        "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: slow}\n"
        "spec:\n  validationActions: [Deny]\n  matchConstraints:\n    resourceRules:\n"
        "    - {apiGroups: [kiln.dev], apiVersions: [v1alpha1], operations: [CREATE], "
        "resources: [environmentrequests]}\n"
        f'  validations:\n  - expression: "{slow}"\n'
    )
    settings.KILN_POLICY_DIR = tmp_path
    settings.KILN_POLICY_TIMEOUT_SECONDS = 0.01
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    assert env.status == Status.DENIED
    outcomes = set(PolicyDecision.objects.filter(environment=env).values_list("outcome", flat=True))
    assert outcomes == {"timeout"}
    assert "portal.environment.denied" in actions(env)


def test_policy_error_denies_and_is_audited(people, settings, tmp_path):
    (tmp_path / "request").mkdir()
    (tmp_path / "request" / "bad.yaml").write_text(
        "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: bad}\n"
        "spec:\n  validationActions: [Deny]\n  matchConstraints:\n    resourceRules:\n"
        "    - {apiGroups: [kiln.dev], apiVersions: [v1alpha1], operations: [CREATE], resources: [environmentrequests]}\n"
        "  validations:\n  - expression: \"image.Parse(object.spec.name).registry() == 'x'\"\n"
    )
    settings.KILN_POLICY_DIR = tmp_path
    # Compiling a new expression can take over the 2 s budget on a loaded machine, which
    # would deny it as "timeout": give it room, so the outcome is the error itself.
    settings.KILN_POLICY_TIMEOUT_SECONDS = 60.0
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    assert env.status == Status.DENIED
    decision = PolicyDecision.objects.get(environment=env)
    assert decision.outcome == "error" and not decision.allowed


def test_missing_policy_set_denies(people, settings, tmp_path):
    settings.KILN_POLICY_DIR = tmp_path / "nowhere"
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    assert env.status == Status.DENIED
    assert PolicyDecision.objects.get(environment=env).outcome == "missing"


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"name": "Not_DNS"}, "name"),
        ({"ttl_hours": 100, "env_class": "ephemeral"}, "ttl_hours"),
        ({"cpu": -1}, "cpu"),
        ({"memory_gib": 10**9}, "memory_gib"),
        ({"env_class": "galaxy"}, "env_class"),
    ],
    ids=["name", "ttl-over-class", "negative-cpu", "absurd-memory", "class"],
)
def test_bad_input_is_refused_per_field_and_creates_nothing(people, overrides, field):
    with pytest.raises(InvalidInput) as err:
        environment_request_submit(actor=people["alice"], data=request_data(**overrides))
    assert field in err.value.extra["fields"]
    assert EnvironmentRequest.objects.count() == 0 and OutboxEvent.objects.count() == 0


def test_idempotency_key_retry_creates_nothing_new(people):
    first, created = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging"), idempotency_key="k1"
    )
    again, created_again = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging"), idempotency_key="k1"
    )
    assert created and not created_again and again.pk == first.pk
    assert Environment.objects.count() == 1
    with pytest.raises(IdempotencyKeyReused):
        environment_request_submit(
            actor=people["alice"],
            data=request_data(env_class="staging", cpu=8),
            idempotency_key="k1",
        )
    assert Environment.objects.count() == 1


def test_a_second_live_environment_with_the_same_name_conflicts(people):
    environment_request_submit(actor=people["alice"], data=request_data(env_class="staging"))
    with pytest.raises(Conflict):
        environment_request_submit(actor=people["alice"], data=request_data(env_class="staging"))
    assert Environment.objects.count() == 1


def test_engineers_request_only_for_their_team(people):
    with pytest.raises(Forbidden):
        environment_request_submit(actor=people["bob"], data=request_data())
    with pytest.raises(Forbidden):
        environment_request_submit(actor=people["carol"], data=request_data())
    assert Environment.objects.count() == 0


def test_self_approval_is_refused_and_changes_nothing(people):
    env, _ = environment_request_submit(
        actor=people["erin"], data=request_data(env_class="staging")
    )
    before = OutboxEvent.objects.count()
    with pytest.raises(SelfApprovalForbidden):
        environment_approve(actor=people["erin"], environment=env)
    env.refresh_from_db()
    assert env.status == Status.PENDING_APPROVAL
    assert ApprovalDecision.objects.count() == 0 and OutboxEvent.objects.count() == before


def test_engineers_cannot_approve(people):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging")
    )
    with pytest.raises(Forbidden):
        environment_approve(actor=people["bob"], environment=env)


def test_prod_needs_two_distinct_approvers(people, django_capture_on_commit_callbacks):
    data = request_data(
        env_class="prod", ttl_hours=1000, justification="launch of the new checkout flow"
    )
    env, _ = environment_request_submit(actor=people["alice"], data=data)
    assert env.status == Status.PENDING_APPROVAL
    environment_approve(actor=people["carol"], environment=env, reason="looks right")
    assert env.status == Status.PENDING_APPROVAL
    with pytest.raises(AlreadyDecided):
        environment_approve(actor=people["carol"], environment=env)
    with django_capture_on_commit_callbacks(execute=True):
        environment_approve(actor=people["dave"], environment=env, reason="ok")
    env.refresh_from_db()
    assert env.status == Status.READY
    assert ApprovalDecision.objects.filter(environment=env).count() == 2
    with pytest.raises(IllegalTransition):
        environment_approve(actor=people["erin"], environment=env)


def test_reject_needs_a_reason_and_ends_the_request(people):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging")
    )
    with pytest.raises(InvalidInput):
        environment_reject(actor=people["carol"], environment=env, reason="  ")
    assert ApprovalDecision.objects.count() == 0
    environment_reject(actor=people["carol"], environment=env, reason="use dev")
    assert env.status == Status.REJECTED
    with pytest.raises(IllegalTransition):
        environment_approve(actor=people["dave"], environment=env)


@pytest.mark.parametrize(
    "current, target",
    [(s, t) for s in Status for t in Status if t not in TRANSITIONS[s]][:200:7],
)
def test_illegal_transitions_raise_and_change_nothing(people, current, target):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging")
    )
    Environment.objects.filter(pk=env.pk).update(status=current.value)
    env.refresh_from_db()
    before = OutboxEvent.objects.count()
    with pytest.raises(IllegalTransition):
        environment_transition(actor=people["root"], environment=env, to=target, reason="test")
    env.refresh_from_db()
    assert env.status == current and OutboxEvent.objects.count() == before


def test_every_legal_transition_is_audited_with_who_why_and_policy_version(people):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging")
    )
    environment_transition(actor=people["root"], environment=env, to=Status.FAILED, reason="broken")
    event = OutboxEvent.objects.filter(action="portal.environment.failed").get()
    assert event.actor == "root"
    assert event.data["reason"] == "broken" and event.data["from"] == "PENDING_APPROVAL"
    assert event.data["policy_version"] == env.policy_version
