"""Provisioning retries, teardown branches (stuck finalizer, unconfirmed audit), reaper and extend."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import OutboxEvent
from kiln.cluster import DeliveryError, ref_of
from kiln.cluster.models import SimulatedObject
from kiln.cluster.simulated import SimulatedBackend
from kiln.cluster.simulated_failures import inject_failure
from kiln.errors import Forbidden, IllegalTransition, InvalidInput
from portal.lifecycle import Status
from portal.models import Environment, ProvisioningStep
from portal.services import (
    environment_extend,
    environment_provision,
    environment_request_submit,
    environment_teardown,
    environment_teardown_request,
    environments_reap_expired,
)
from portal.tasks import provision_environment
from tests.portal.conftest import drain_audit, request_data

pytestmark = pytest.mark.django_db


def events(env: Environment, action: str) -> int:
    return OutboxEvent.objects.filter(
        target=f"portal.environment:{env.public_id}", action=action
    ).count()


def chained(env: Environment, action: str) -> int:
    from audit.models import ChainEvent

    return ChainEvent.objects.filter(
        target=f"portal.environment:{env.public_id}", action=action
    ).count()


def ready_env(people, django_capture_on_commit_callbacks, **overrides) -> Environment:
    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(actor=people["alice"], data=request_data(**overrides))
    env.refresh_from_db()
    assert env.status == Status.READY, env.status_reason
    return env


def test_worker_killed_mid_apply_then_redelivered_ends_ready_without_duplicates(
    people, django_capture_on_commit_callbacks
):
    inject_failure("apply_error", kind="NetworkPolicy", times=1)
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(tenant_control_plane=True, database=True)
    )
    assert env.status == Status.APPROVED
    # The first delivery dies half-way through apply (Namespace, quota and limits are in, the rest not).
    with pytest.raises(DeliveryError):
        environment_provision(environment_id=env.pk)
    env.refresh_from_db()
    assert env.status == Status.PROVISIONING
    assert SimulatedObject.objects.filter(namespace__in=["", env.namespace]).count() == 3
    # Redelivery (acks_late): the same task runs again from the top.
    assert provision_environment.apply(args=(env.pk,)).get() == "ready"
    provision_environment.apply(args=(env.pk,)).get()  # and a duplicate delivery changes nothing
    env.refresh_from_db()
    assert env.status == Status.READY
    # The plan's objects and the sink token's Secret in the host; flow control in the tenant's.
    assert SimulatedObject.objects.filter(cluster="").count() == len(env.manifests) + 1
    assert SimulatedObject.objects.filter(cluster=f"{env.namespace}/{env.namespace}").count() == 2
    assert events(env, "portal.environment.readied") == 1
    assert events(env, "portal.environment.provisioning_started") == 1
    steps = {s.name: s for s in ProvisioningStep.objects.filter(environment=env)}
    assert steps["compose"].attempts == 1 and steps["apply"].attempts == 2
    # compose, manifest-policy, apply, tenant-audit-token, tenant-flow-control, ready
    assert events(env, "portal.provisioning_step.completed") == 6
    assert env.datastore_pool == "etcd-a1"


def test_not_ready_before_the_provisioning_deadline_fails(people, settings):
    inject_failure("never_ready", kind="Application")
    settings.KILN_PROVISION_TIMEOUT_SECONDS = 0
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    assert environment_provision(environment_id=env.pk) == "failed"
    env.refresh_from_db()
    assert env.status == Status.FAILED and "Application" in env.status_reason


def test_degraded_object_fails_provisioning(people):
    inject_failure("degraded", kind="ResourceQuota")
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    assert environment_provision(environment_id=env.pk) == "failed"
    env.refresh_from_db()
    assert env.status == Status.FAILED


def test_teardown_deletes_everything_after_the_audit_event_is_chained(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks, tenant_control_plane=True)
    environment_teardown_request(actor=people["alice"], environment=env, reason="done with it")
    assert env.status == Status.EXPIRING
    # Workloads go, but the control plane and namespace stay until the audit event is in the chain.
    assert environment_teardown(environment_id=env.pk) == "pending"
    backend = SimulatedBackend()
    assert backend.get("v1", "Namespace", "", env.namespace) is not None
    assert (
        backend.get(
            "kamaji.clastix.io/v1alpha1", "TenantControlPlane", env.namespace, env.namespace
        )
        is not None
    )
    assert backend.get("argoproj.io/v1alpha1", "Application", "argocd", env.namespace) is None
    drain_audit()
    assert chained(env, "portal.environment.workloads_removed") == 1
    assert environment_teardown(environment_id=env.pk) == "deleted"
    env.refresh_from_db()
    assert env.status == Status.DELETED and env.deleted_at
    assert SimulatedObject.objects.count() == 0
    names = list(
        ProvisioningStep.objects.filter(environment=env, position__gte=10).values_list(
            "name", flat=True
        )
    )
    assert names == [
        "cordon",
        "delete-workloads",
        "drain-nodes",
        "finalizers-cleared",
        "tenant-audit-acknowledged",
        "audit-confirmed",
        "delete-namespace",
    ]
    assert environment_teardown(environment_id=env.pk) == "noop"


def test_stuck_finalizer_quarantines_with_an_owner_and_keeps_resources_attributable(
    people, django_capture_on_commit_callbacks, settings
):
    settings.KILN_QUARANTINE_OWNER = "root"
    inject_failure("stuck_finalizer", kind="Application")
    env = ready_env(people, django_capture_on_commit_callbacks)
    environment_teardown_request(actor=people["alice"], environment=env)
    assert environment_teardown(environment_id=env.pk) == "pending"
    Environment.objects.filter(pk=env.pk).update(
        teardown_deadline=timezone.now() - timedelta(seconds=1)
    )
    assert environment_teardown(environment_id=env.pk) == "quarantined"
    env.refresh_from_db()
    assert env.status == Status.QUARANTINED
    assert env.quarantine_owner.username == "root"
    assert "Application" in env.status_reason
    stuck = SimulatedObject.objects.get(kind="Application")
    assert (
        stuck.labels["kiln.dev/team"] == "payments"
        and stuck.labels["kiln.dev/request-id"] == env.public_id
    )
    assert SimulatedObject.objects.filter(kind="Namespace", name=env.namespace).exists()
    event = OutboxEvent.objects.get(action="portal.environment.quarantined")
    assert event.data["owner"] == "root" and event.data["remaining"]
    # A person clears the finalizer and retries: the teardown completes.
    SimulatedBackend().clear_finalizers(ref_of(stuck.manifest))
    environment_teardown_request(
        actor=people["alice"], environment=env, reason="finalizer cleared by hand"
    )
    assert env.status == Status.TEARING_DOWN
    environment_teardown(environment_id=env.pk)
    drain_audit()
    assert environment_teardown(environment_id=env.pk) == "deleted"


def test_unconfirmed_audit_event_past_the_deadline_quarantines(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    environment_teardown_request(actor=people["alice"], environment=env)
    assert environment_teardown(environment_id=env.pk) == "pending"
    Environment.objects.filter(pk=env.pk).update(
        teardown_deadline=timezone.now() - timedelta(seconds=1)
    )
    assert environment_teardown(environment_id=env.pk) == "quarantined"
    env.refresh_from_db()
    assert "audit event" in env.status_reason
    assert env.quarantine_owner.username == "alice"
    assert SimulatedObject.objects.filter(kind="Namespace", name=env.namespace).exists()


def test_teardown_of_another_teams_environment_is_forbidden(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    with pytest.raises(Forbidden):
        environment_teardown_request(actor=people["bob"], environment=env)
    env.refresh_from_db()
    assert env.status == Status.READY


def test_reaper_dry_runs_until_for_real(people, django_capture_on_commit_callbacks):
    env = ready_env(people, django_capture_on_commit_callbacks)
    later = env.expires_at + timedelta(seconds=1)
    report = environments_reap_expired(now=later)
    assert report["expired"] == [env.public_id]
    env.refresh_from_db()
    assert env.status == Status.READY
    report = environments_reap_expired(now=later, dry_run=False)
    env.refresh_from_db()
    assert env.status == Status.EXPIRING
    assert (
        OutboxEvent.objects.get(action="portal.environment.expiry_started").actor == "system:reaper"
    )


def test_extend_within_the_class_limit(people, django_capture_on_commit_callbacks):
    env = ready_env(people, django_capture_on_commit_callbacks, env_class="ephemeral", ttl_hours=24)
    before = env.expires_at
    environment_extend(actor=people["alice"], environment=env, hours=24)
    assert env.expires_at == before + timedelta(hours=24)
    assert events(env, "portal.environment.extended") == 1
    with pytest.raises(InvalidInput) as err:
        environment_extend(
            actor=people["alice"], environment=env, hours=48
        )  # 96h > 72h for ephemeral
    assert "hours" in err.value.extra["fields"]
    env.refresh_from_db()
    assert env.expires_at == before + timedelta(hours=24)
    environment_teardown_request(actor=people["alice"], environment=env)
    with pytest.raises(IllegalTransition):
        environment_extend(actor=people["alice"], environment=env, hours=1)


def test_provisioning_waits_while_objects_become_ready(people, settings, clock):
    settings.KILN_SIM_DELAY_PROFILE = "realistic"
    settings.KILN_SIM_DELAY_SCALE = 0.4  # the Application is the slowest: 5 s x 0.4 = 2 s
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    assert environment_provision(environment_id=env.pk) == "pending"
    assert environment_provision(environment_id=env.pk) == "pending"
    step = ProvisioningStep.objects.get(environment=env, name="ready")
    assert step.status == "running" and step.attempts == 1
    clock.advance(1.9)
    assert environment_provision(environment_id=env.pk) == "pending"  # the Application: 2 s
    clock.advance(0.2)
    assert environment_provision(environment_id=env.pk) == "ready"
    env.refresh_from_db()
    assert env.status == Status.READY
    assert events(env, "portal.environment.readied") == 1
