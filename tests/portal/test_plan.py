"""The plan before approval: composed at submission, shown on the queue and in admin, diffed
against the previous version of the environment, and byte for byte what delivery commits."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from audit.models import OutboxEvent
from kiln.cluster import ref_of
from kiln.cluster.gitops import GitOpsBackend
from kiln.identity.models import Team
from portal.lifecycle import Status
from portal.models import Environment
from portal.services import environment_approve, environment_request_submit
from portal.services.plan import SEPARATOR, environment_plan, plan_sha256
from tests.portal.conftest import request_data
from tests.portal.test_admin import staff
from tests.portal.test_pages import login

pytestmark = pytest.mark.django_db


def test_a_request_for_approval_carries_its_plan_and_the_audit_event_names_its_hash(people):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging", tenant_control_plane=True)
    )
    assert env.status == Status.PENDING_APPROVAL and env.manifests
    plan = environment_plan(environment=env)
    kinds = [m["kind"] for m in env.manifests]
    assert "TenantControlPlane" in kinds and kinds[-1] == "Application"
    assert [name for name, _ in plan.files][0] == "core_namespace___payments-checkout.yaml"
    assert plan.verdicts and not plan.denials
    assert plan.hourly_cost == env.hourly_cost and plan.total_cost == round(env.hourly_cost * 48, 2)
    assert plan.previous is None and plan.diff.startswith("--- nothing\n+++ " + env.public_id)
    # What provisioning writes outside Git is shown apart: the token's Secret (never its value)
    # and the flow control inside the tenant's API server, as the text it applies.
    outside = dict(plan.outside)
    assert list(outside)[0] == (
        f"v1 Secret {env.namespace}/{env.namespace}-tenant-audit-token, in the cluster"
    )
    flow = (
        "flowcontrol.apiserver.k8s.io/v1 FlowSchema kiln-tenant-sa-writes, "
        "inside the tenant's API server"
    )
    assert "distinguisherMethod:\n    type: ByUser" in outside[flow]
    assert len(outside) == 3
    event = OutboxEvent.objects.get(
        target=f"portal.environment:{env.public_id}", action="portal.environment.planned"
    )
    assert event.data["plan_sha256"] == plan.sha256 == plan_sha256(env.manifests)


def test_the_plan_is_byte_identical_to_what_the_gitops_backend_commits(
    people, settings, django_capture_on_commit_callbacks
):
    settings.KILN_DELIVERY_BACKEND = "gitops"
    env, _ = environment_request_submit(
        actor=people["alice"],
        data=request_data(env_class="staging", tenant_control_plane=True, database=True),
    )
    planned = plan_sha256(env.manifests)
    with django_capture_on_commit_callbacks(execute=True):
        environment_approve(actor=people["carol"], environment=env, reason="plan read")
    env.refresh_from_db()
    assert plan_sha256(env.manifests) == planned  # provisioning delivered the plan, not a new one
    assert env.status == Status.READY, env.status_reason
    plan = environment_plan(environment=env)
    committed = []
    for manifest in env.manifests:
        path = (
            f"environments/{GitOpsBackend.environment_of(manifest)}/platform/"
            f"{GitOpsBackend.file_name(ref_of(manifest))}"
        )
        committed.append(
            subprocess.run(
                ["git", "--git-dir", settings.KILN_GITOPS_REPO, "show", f"main:{path}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
    assert [text for _, text in plan.files] == committed
    received = "".join(SEPARATOR + text for text in committed)
    assert hashlib.sha256(received.encode()).hexdigest() == plan.sha256


def test_the_plan_is_diffed_against_the_previous_version_of_the_environment(people):
    first, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging", cpu=4)
    )
    # The first version is gone (its teardown is another test's subject); the name is free again.
    Environment.objects.filter(pk=first.pk).update(status=Status.DELETED.value)
    second, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging", cpu=8)
    )
    plan = environment_plan(environment=second)
    assert plan.previous.pk == first.pk
    lines = plan.diff.splitlines()
    assert lines[0] == f"--- {first.public_id}" and lines[1] == f"+++ {second.public_id}"
    assert "-    requests.cpu: '4'" in lines and "+    requests.cpu: '8'" in lines
    # The request id label differs too, and the pod quota follows the CPU (10 pods a core);
    # nothing else was asked differently.
    changed = [x for x in lines[2:] if x[:1] in "+-" and not x.startswith(("+++", "---"))]
    unexpected = [x for x in changed if not any(w in x for w in ("cpu", "pods", "request-id"))]
    assert unexpected == [], unexpected


def test_approvers_see_the_plan_on_the_queue_and_in_admin(people):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging")
    )
    sha = environment_plan(environment=env).sha256
    quinn = login("quinn", "approver", Team.objects.get(slug="payments"))
    page = quinn.get("/environments/approvals/").content.decode()
    assert sha in page and "Manifests as committed" in page and "kiln-quota" in page
    assert "never committed" not in page  # no control plane: nothing outside the plan
    environment_request_submit(
        actor=people["alice"],
        data=request_data(env_class="staging", name="ledger", tenant_control_plane=True),
    )
    page = quinn.get("/environments/approvals/").content.decode()
    assert "Also written, never committed (3)" in page and "-tenant-audit-token" in page
    admin_page = staff("zoe", "approver", "payments").get(f"/admin/portal/environment/{env.pk}/change/")
    assert admin_page.status_code == 200 and sha in admin_page.content.decode()


def _approved_staging(people, django_capture_on_commit_callbacks):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging")
    )
    assert env.status == Status.PENDING_APPROVAL and env.manifests
    with django_capture_on_commit_callbacks(execute=False):  # provisioned below, by hand
        environment_approve(actor=people["carol"], environment=env)
    return env


def test_provisioning_takes_the_plans_verdicts_under_the_same_policy_set(
    people, monkeypatch, django_capture_on_commit_callbacks
):
    """The manifest policies ran on these exact manifests at submission: with the same policy
    set in force they are not evaluated again, and their verdicts are stored once."""
    from portal.services import gate
    from portal.services.provisioning import READY, environment_provision

    env = _approved_staging(people, django_capture_on_commit_callbacks)
    planned = list(env.policy_decisions.filter(stage="manifest").values_list("policy", "target"))
    assert planned

    def evaluated_again(**_):
        raise AssertionError("the manifest policies ran again on the plan's manifests")

    monkeypatch.setattr(gate, "evaluate_manifests", evaluated_again)
    assert environment_provision(environment_id=env.pk) == READY
    assert sorted(
        env.policy_decisions.filter(stage="manifest").values_list("policy", "target")
    ) == sorted(planned)
    step = OutboxEvent.objects.get(
        target=f"portal.environment:{env.public_id}",
        action="portal.provisioning_step.completed",
        data__step="manifest-policy",
    )
    assert step.data["policy"]["allowed"] and step.data["policy"]["checked"] == len(planned)


def test_a_policy_set_changed_since_the_plan_is_evaluated_again_and_can_deny(
    people, settings, tmp_path, django_capture_on_commit_callbacks
):
    import shutil

    from portal.services.provisioning import FAILED, environment_provision

    shutil.copytree(settings.BASE_DIR / "deploy" / "policies", tmp_path / "policies")
    settings.KILN_POLICY_DIR = tmp_path / "policies"
    env = _approved_staging(people, django_capture_on_commit_callbacks)
    (tmp_path / "policies" / "manifests" / "deny-namespaces.yaml").write_text(
        """apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: deny-namespaces
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["namespaces"]
  validations:
    - expression: "object.metadata.name == 'never'"
      message: no namespaces after the plan
"""
    )
    assert environment_provision(environment_id=env.pk) == FAILED
    env.refresh_from_db()
    assert env.status == Status.FAILED and "no namespaces after the plan" in env.status_reason
