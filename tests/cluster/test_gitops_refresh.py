"""After a commit the gitops backend asks Argo CD to refresh; a simulated Argo CD (a real HTTP
server on 127.0.0.1 reading the real bare repository) syncs on refresh or on its poll."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from kiln.cluster.argocd import ArgoCDRefresher
from kiln.cluster.gitops import GitOpsBackend
from tests.cluster.test_gitops import git, manifests
from tests.support.argocd_sim import SimulatedArgoCD

TOKEN = "argocd-test-token"


def wait_synced(argocd: SimulatedArgoCD, revision: str, seconds: float = 10.0) -> float | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if revision in argocd.synced_at:
            return argocd.synced_at[revision]
        time.sleep(0.01)
    return None


def gitops_with(repo, tmp_path, refresher) -> GitOpsBackend:
    return GitOpsBackend(str(repo), work_dir=tmp_path / "work", refresher=refresher)


def test_a_commit_asks_argocd_to_refresh_and_it_syncs_before_its_poll(tmp_path):
    repo = tmp_path / "gitops.git"
    gitops = gitops_with(repo, tmp_path, None)
    gitops.apply(manifests())  # the repository exists before Argo CD watches it
    with SimulatedArgoCD(repo, poll_seconds=3600, token=TOKEN) as argocd:
        gitops.refresher = ArgoCDRefresher(argocd.url, token=TOKEN)
        gitops.apply(manifests(replicas=3))
        revision = git(repo, "rev-parse", "main").strip()
        assert gitops.last_revision == revision
        synced = wait_synced(argocd, revision)
        # An hour-long poll: only the refresh can have synced it, and it did at once.
        assert synced is not None and synced - gitops.last_pushed_at < 2.0
        assert argocd.synced_by[revision] == "refresh"
        assert argocd.refreshes == 1 and argocd.polls == 0
        assert gitops.refresher.refreshed == 1 and gitops.refresher.failed == 0
        gitops.apply(manifests(replicas=3))  # unchanged: no commit, so no refresh either
        assert argocd.refreshes == 1
        (ref,) = [r for r in gitops.apply(manifests(replicas=3)) if r.kind == "Namespace"]
        gitops.delete(ref)  # a delete is a commit too
        assert argocd.refreshes == 2
        assert wait_synced(argocd, git(repo, "rev-parse", "main").strip()) is not None


def test_without_a_refresher_the_commit_waits_for_the_poll(tmp_path):
    repo = tmp_path / "gitops.git"
    gitops = gitops_with(repo, tmp_path, None)
    gitops.apply(manifests())
    with SimulatedArgoCD(repo, poll_seconds=0.5) as argocd:
        gitops.apply(manifests(replicas=4))
        revision = git(repo, "rev-parse", "main").strip()
        # Nobody asked: the controller's own poll came round and synced it.
        assert wait_synced(argocd, revision) is not None
        assert argocd.synced_by[revision] == "poll"
        assert argocd.polls >= 1 and argocd.refreshes == 0


def test_a_refused_or_unreachable_refresh_does_not_fail_the_commit(tmp_path):
    repo = tmp_path / "gitops.git"
    with SimulatedArgoCD(repo, poll_seconds=3600, token=TOKEN) as argocd:
        refresher = ArgoCDRefresher(argocd.url, token="wrong")
        gitops = gitops_with(repo, tmp_path, refresher)
        gitops.apply(manifests())
        assert refresher.failed == 1 and argocd.refreshes == 0
        url = argocd.url
    gitops.refresher = ArgoCDRefresher(url, token=TOKEN, timeout=1.0)  # the server is gone
    gitops.apply(manifests(replicas=5))
    assert gitops.refresher.failed == 1
    assert git(repo, "rev-list", "--count", "main").strip() == "2"  # both commits are in


def test_the_simulated_api_answers_like_argocd(tmp_path):
    repo = tmp_path / "gitops.git"
    gitops_with(repo, tmp_path, None).apply(manifests())
    with SimulatedArgoCD(repo, poll_seconds=3600, token=TOKEN) as argocd:
        refresher = ArgoCDRefresher(argocd.url, token=TOKEN)
        assert refresher.refresh_url() == (
            f"{argocd.url}/api/v1/applications/kiln-environments?refresh=normal&appNamespace=argocd"
        )
        request = urllib.request.Request(  # noqa: S310 - the loopback simulator
            f"{argocd.url}/api/v1/applications/kiln-environments",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        body = json.load(urllib.request.urlopen(request, timeout=5))  # noqa: S310
        assert body["status"]["sync"] == {
            "status": "Synced",
            "revision": git(repo, "rev-parse", "main").strip(),
        }
        for path, headers, status in [
            ("kiln-environments", {}, 401),
            ("someone-else", {"Authorization": f"Bearer {TOKEN}"}, 404),
        ]:
            with pytest.raises(urllib.error.HTTPError) as raised:
                url = f"{argocd.url}/api/v1/applications/{path}"
                urllib.request.urlopen(  # noqa: S310 - the loopback simulator
                    urllib.request.Request(url, headers=headers),  # noqa: S310
                    timeout=5,
                )
            assert raised.value.code == status
        assert argocd.refreshes == 0  # a plain GET is not a refresh
