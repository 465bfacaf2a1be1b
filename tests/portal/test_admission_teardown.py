"""Kiln's own writes pass the admission policies it renders: an environment is provisioned and
torn down through a backend that admits every CREATE, UPDATE and DELETE (and the namespace
controller's cascade and the finalizer removals) against deploy/policies/manifests, evaluated
with cel-python exactly as the gate evaluates them. The same policies deny a stranger."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from kiln.cluster import DeliveryError, ref_of
from kiln.cluster.base import secret_manifest
from kiln.cluster.simulated import SimulatedBackend
from portal import compose as c
from portal import policy
from portal.lifecycle import Status
from portal.services import (
    environment_request_submit,
    environment_teardown,
    environment_teardown_request,
)
from tests.portal.conftest import drain_audit, request_data

pytestmark = pytest.mark.django_db

KILN = {"username": "system:serviceaccount:kiln:kiln", "groups": ["system:serviceaccounts"]}
NAMESPACE_CONTROLLER = {"username": "system:serviceaccount:kube-system:namespace-controller"}
STRANGER = {"username": "system:serviceaccount:payments-checkout:default"}


def admission_policies() -> policy.PolicySet:
    return policy.load_policy_set(
        Path(django_settings.BASE_DIR) / "deploy" / "policies" / "manifests", "manifests"
    )


class AdmittingBackend:
    """The simulated cluster behind an admission controller running the rendered policies.

    Every write Kiln sends is reviewed as the API server would send it (CREATE or UPDATE with the
    live object as oldObject; DELETE with oldObject only); deleting a Namespace also reviews the
    namespace controller's DELETE of everything in it, and a deletion that waits on finalizers
    reviews the controller's UPDATE that removes them. A denial refuses the write.
    """

    def __init__(self, user: dict) -> None:
        self.inner = SimulatedBackend()
        self.policies = admission_policies()
        self.user = user
        self.reviews: list[tuple[str, str, list[policy.Verdict]]] = []
        self.known: list[dict] = []  # kinds the namespace cascade looks for

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _admit(self, operation: str, new: dict | None, old: dict | None, user: dict) -> None:
        verdicts = policy.admit(self.policies, policy.AdmissionRequest(operation, new, old, user))
        subject = new if new is not None else old
        self.reviews.append((operation, str(ref_of(subject)), verdicts))
        denied = [v for v in verdicts if not v.allowed]
        if denied:
            raise DeliveryError(
                f"admission denied {operation} {ref_of(subject)}: {denied[0].message}",
                retryable=False,
            )

    def apply(self, manifests, *, field_manager="kiln"):
        for manifest in manifests:
            live = self.inner.get(*ref_of(manifest).key)
            if live is None:
                self._admit("CREATE", manifest, None, self.user)
            else:
                merged = copy.deepcopy(live)
                merged.update({k: v for k, v in manifest.items() if k != "metadata"})
                merged["metadata"]["labels"] = manifest["metadata"].get("labels", {})
                self._admit("UPDATE", merged, live, self.user)
        return self.inner.apply(manifests, field_manager=field_manager)

    def write_secret(self, *, namespace, name, data, labels):
        """The sink token's Secret is a write like any other: admitted first."""
        manifest = secret_manifest(namespace=namespace, name=name, data=data, labels=labels)
        return self.apply([manifest])[0]

    def delete(self, ref):
        live = self.inner.get(*ref.key)
        if live is None:
            return self.inner.delete(ref)
        self._admit("DELETE", None, live, self.user)
        if ref.kind == "Namespace":
            for api_version, kind in {(m["apiVersion"], m["kind"]) for m in self.known}:
                for obj in self.inner.list(api_version, kind, ref.name):
                    self._admit("DELETE", None, obj, NAMESPACE_CONTROLLER)
        if live["metadata"].get("finalizers"):
            cleared = copy.deepcopy(live)
            cleared["metadata"]["finalizers"] = []
            controller = {"username": f"system:serviceaccount:controllers:{ref.kind.lower()}"}
            self._admit("UPDATE", cleared, live, controller)
        return self.inner.delete(ref)


@pytest.fixture
def admitting(monkeypatch):
    backend = AdmittingBackend(KILN)
    monkeypatch.setattr("portal.services.provisioning.get_backend", lambda: backend)
    monkeypatch.setattr("portal.services.teardown._get_backend", lambda: backend)
    return backend


def test_the_rendered_policies_check_update_and_delete():
    operations = set()
    for pf in admission_policies().files:
        for rule in pf.doc["spec"]["matchConstraints"]["resourceRules"]:
            operations.update(rule["operations"])
    assert {"CREATE", "UPDATE", "DELETE"} <= operations


def ready_environment(people, capture):
    """A READY environment with every component, provisioned through the admitting backend."""
    data = request_data(tenant_control_plane=True, spot_node_pool=True, database=True)
    with capture(execute=True):
        env, _ = environment_request_submit(actor=people["alice"], data=data)
    env.refresh_from_db()
    assert env.status == Status.READY, env.status_reason
    return env


def tear_down(people, env) -> None:
    """Tear it down step by step, as the task's re-queues would: finalizers clear, the audit
    event is chained; it ends DELETED."""
    environment_teardown_request(actor=people["alice"], environment=env, reason="done")
    for _ in range(100):
        result = environment_teardown(environment_id=env.pk)
        if result != "pending":
            break
        drain_audit()
        time.sleep(0.05)
    assert result == "deleted"
    env.refresh_from_db()
    assert env.status == Status.DELETED, env.status_reason


def test_teardown_through_the_rendered_admission_policies_is_never_denied(
    people, admitting, django_capture_on_commit_callbacks
):
    env = ready_environment(people, django_capture_on_commit_callbacks)
    admitting.known = env.manifests + [
        {"apiVersion": a, "kind": k} for a, k in [*c.WORKLOAD_RESOURCES, ("v1", "Secret")]
    ]
    tear_down(people, env)
    by_operation: dict[str, int] = {}
    for operation, _target, verdicts in admitting.reviews:
        by_operation[operation] = by_operation.get(operation, 0) + 1
        assert all(v.allowed for v in verdicts), (operation, _target, verdicts)
    # Every kind of write was reviewed: the creates (the plan's and the sink token's Secret), the
    # cordon's updates (NodePool limits and pod quota to zero), finalizer removals, Kiln's deletes
    # and the namespace's cascade (the Secret's included).
    assert by_operation["CREATE"] == len(env.manifests) + 1
    secret = f"v1 Secret {env.namespace}/{env.namespace}-tenant-audit-token"
    assert [op for op, target, _ in admitting.reviews if target == secret] == ["CREATE", "DELETE"]
    assert by_operation["UPDATE"] >= 2
    assert by_operation["DELETE"] >= len(env.manifests)
    guarded = [
        v
        for _, _, verdicts in admitting.reviews
        for v in verdicts
        if v.policy in ("kiln-guarded-updates", "kiln-guarded-deletes")
    ]
    assert guarded and all(v.outcome == policy.ALLOW for v in guarded)


def test_teardown_deletes_what_it_applied_in_the_reverse_order(
    people, admitting, django_capture_on_commit_callbacks
):
    env = ready_environment(people, django_capture_on_commit_callbacks)
    applied = [str(ref_of(m)) for m in env.manifests]
    tear_down(people, env)
    # Kiln's own deletes run up to the namespace's; the namespace controller's cascade follows it.
    deletes = [target for op, target, _ in admitting.reviews if op == "DELETE"]
    namespace = str(ref_of(env.manifests[0]))
    assert namespace.startswith("v1 Namespace ")
    kilns = deletes[: deletes.index(namespace) + 1]
    deleted_plan = [t for i, t in enumerate(kilns) if t in applied and t not in kilns[:i]]
    # The workloads, then the control plane's flow control after the control plane, then the
    # namespace: each object deleted after every object applied after it.
    assert {"TenantControlPlane", "FlowSchema", "NodePool"} <= {t.split()[1] for t in deleted_plan}
    assert deleted_plan == sorted(deleted_plan, key=applied.index, reverse=True)
    assert deleted_plan[-1] == namespace


def test_the_same_policies_deny_a_stranger_and_an_update_that_strips_attribution(people):
    manifests = c.compose(
        c.EnvironmentSpec(
            request_id="env_x",
            team="payments",
            name="checkout",
            namespace="payments-checkout",
            env_class="dev",
            ttl_hours=48,
            workload_class="standard",
            cpu=4,
            memory_gib=16,
        )
    )
    namespace = manifests[0]
    policies = admission_policies()

    def outcome(operation, new, old, user) -> list[str]:
        request = policy.AdmissionRequest(operation, new, old, user)
        return [v.message for v in policy.admit(policies, request) if not v.allowed]

    assert outcome("DELETE", None, namespace, KILN) == []
    assert (
        outcome("DELETE", None, namespace, {"username": "x", "groups": ["kiln:platform-admin"]})
        == []
    )
    assert "deleted only by Kiln" in outcome("DELETE", None, namespace, STRANGER)[0]
    stripped = copy.deepcopy(namespace)
    stripped["metadata"]["labels"]["kiln.dev/team"] = "search"
    assert "may not remove or change" in outcome("UPDATE", stripped, namespace, KILN)[0]
    unlabelled = copy.deepcopy(namespace)
    del unlabelled["metadata"]["labels"]
    assert "may not remove or change" in outcome("UPDATE", unlabelled, namespace, KILN)[0]
    # An object Kiln does not manage is not guarded.
    foreign = copy.deepcopy(namespace)
    foreign["metadata"]["labels"] = {}
    assert outcome("DELETE", None, foreign, STRANGER) == []
