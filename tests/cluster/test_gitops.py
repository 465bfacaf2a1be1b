"""GitOps backend: commits into a real bare repository, one directory per environment, health read back."""

from __future__ import annotations

import subprocess

import pytest

from kiln.cluster import HealthStatus
from kiln.cluster.gitops import GitOpsBackend
from kiln.cluster.simulated import SimulatedBackend

pytestmark = pytest.mark.django_db


def git(repo, *args) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def manifests(env: str = "payments-web", replicas: int = 2) -> list[dict]:
    labels = {"kiln.dev/environment": env, "kiln.dev/team": "payments"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": env, "labels": labels}},
        {
            "apiVersion": "kamaji.clastix.io/v1alpha1",
            "kind": "TenantControlPlane",
            "metadata": {"name": env, "namespace": env, "labels": labels},
            "spec": {"controlPlane": {"deployment": {"replicas": replicas}}},
        },
    ]


@pytest.fixture
def repo(tmp_path):
    return tmp_path / "gitops.git"


def backend(repo, tmp_path, name="w1", observer=True) -> GitOpsBackend:
    return GitOpsBackend(
        str(repo), work_dir=tmp_path / name, observer=SimulatedBackend() if observer else None
    )


def test_apply_commits_one_directory_per_environment_and_is_idempotent(repo, tmp_path):
    gitops = backend(repo, tmp_path)
    refs = gitops.apply(manifests())
    files = git(repo, "ls-tree", "-r", "--name-only", "main").split()
    assert files == [
        "environments/payments-web/platform/core_namespace___payments-web.yaml",
        "environments/payments-web/platform/kamaji.clastix.io_tenantcontrolplane_payments-web_payments-web.yaml",
    ]
    assert git(repo, "rev-list", "--count", "main").strip() == "1"
    gitops.apply(manifests())
    assert git(repo, "rev-list", "--count", "main").strip() == "1"  # unchanged: no commit
    gitops.apply(manifests(replicas=3))
    assert git(repo, "rev-list", "--count", "main").strip() == "2"
    assert gitops.desired(refs[1])["spec"]["controlPlane"]["deployment"]["replicas"] == 3
    assert (
        gitops.health(refs[0]).status == HealthStatus.HEALTHY
    )  # read back from the synced cluster


def test_two_workers_share_the_repository(repo, tmp_path):
    first, second = backend(repo, tmp_path, "w1"), backend(repo, tmp_path, "w2")
    first.apply(manifests("payments-a"))
    second.apply(manifests("payments-b"))
    first.apply(manifests("payments-c"))
    dirs = {p.split("/")[1] for p in git(repo, "ls-tree", "-r", "--name-only", "main").split()}
    assert dirs == {"payments-a", "payments-b", "payments-c"}
    assert git(repo, "rev-list", "--count", "main").strip() == "3"


def test_delete_removes_the_file_in_a_commit(repo, tmp_path):
    gitops = backend(repo, tmp_path)
    refs = gitops.apply(manifests())
    assert gitops.delete(refs[1]) is True
    files = git(repo, "ls-tree", "-r", "--name-only", "main").split()
    assert len(files) == 1 and "namespace" in files[0]
    assert gitops.get(*refs[1].key) is None
    assert gitops.delete(refs[1]) is False


def test_without_a_syncing_observer_health_is_progressing(repo, tmp_path):
    gitops = backend(repo, tmp_path, observer=False)
    [ns, _] = gitops.apply(manifests())
    assert gitops.health(ns).status == HealthStatus.PROGRESSING
    assert gitops.get(*ns.key)["metadata"]["name"] == "payments-web"
