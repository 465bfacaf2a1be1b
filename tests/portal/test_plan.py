"""The plan before approval: composed at submission, shown on the queue and in admin, diffed
against the previous version of the environment, and byte for byte what delivery commits."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from audit.models import OutboxEvent
from kiln.cluster import ref_of
from kiln.cluster.gitops import GitOpsBackend
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
    page = login("quinn", "approver").get("/environments/approvals/").content.decode()
    assert sha in page and "Manifests as committed" in page and "kiln-quota" in page
    admin_page = staff("zoe", "approver").get(f"/admin/portal/environment/{env.pk}/change/")
    assert admin_page.status_code == 200 and sha in admin_page.content.decode()
