"""Provisioning and teardown through the kubernetes (a real local API server) and gitops backends."""

from __future__ import annotations

import subprocess

import pytest

from tests.cluster.fake_kube import FakeKube

pytestmark = pytest.mark.django_db


@pytest.fixture
def kube():
    fake = FakeKube().start()
    yield fake
    fake.stop()


def _git(repo, *args) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def test_provisioning_and_teardown_through_the_kubernetes_backend(
    kube, people, settings, django_capture_on_commit_callbacks
):
    from portal.models import Environment
    from portal.services import (
        environment_request_submit,
        environment_teardown,
        environment_teardown_request,
    )
    from tests.portal.conftest import drain_audit, request_data

    settings.KILN_DELIVERY_BACKEND = "kubernetes"
    settings.KILN_KUBE_API_URL = kube.url
    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(
            actor=people["alice"], data=request_data(tenant_control_plane=True)
        )
    env.refresh_from_db()
    assert env.status == "READY", env.status_reason
    assert len(kube.objects) == len(env.manifests)
    environment_teardown_request(actor=people["alice"], environment=env)
    assert environment_teardown(environment_id=env.pk) == "pending"
    drain_audit()
    assert environment_teardown(environment_id=env.pk) == "deleted"
    assert kube.objects == {}
    assert Environment.objects.get(pk=env.pk).status == "DELETED"


def test_provisioning_through_gitops_reaches_ready(
    people, settings, django_capture_on_commit_callbacks
):
    from portal.services import environment_request_submit
    from tests.portal.conftest import request_data

    settings.KILN_DELIVERY_BACKEND = "gitops"
    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    env.refresh_from_db()
    assert env.status == "READY", env.status_reason
    files = _git(settings.KILN_GITOPS_REPO, "ls-tree", "-r", "--name-only", "main").split()
    assert files and all(f.startswith("environments/payments-checkout/platform/") for f in files)
    assert len(files) == len(env.manifests)
