"""GitOps delivery: commit each environment's manifests into a Git repository that Argo CD syncs.

Layout of the repository (branch `KILN_GITOPS_BRANCH`)::

    environments/<environment>/platform/<group>_<kind>_<namespace>_<name>.yaml

one directory per environment (the `kiln.dev/environment` label; otherwise the
namespace, or `_cluster`). Argo CD's Application for the environment (also
committed) syncs that directory. Each apply or delete is one commit, pushed
with a bounded retry on a non-fast-forward race, so several workers can share
one repository; an unchanged manifest makes no commit.

Health is read back from an observer backend: `simulated` (standalone: the
simulated cluster stands in for Argo CD and syncs each commit at once) or
`kubernetes` (Argo CD syncs; the live objects are read from the API server).
The git CLI does the work; a cross-process file lock serialises each work tree.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from kiln.cluster.argocd import ArgoCDRefresher
from kiln.cluster.base import (
    AppliedRef,
    DeliveryError,
    Health,
    HealthStatus,
    PodBinding,
    desired_state,
    ref_of,
)
from kiln.cluster.protocol import DeliveryBackend, LeaseMirror, ListQuery
from kiln.cluster.tree import ObjectState, SyncStatus, state_of

ENV_LABEL = "kiln.dev/environment"
AUTHOR = ["-c", "user.name=Kiln", "-c", "user.email=kiln@localhost"]
PUSH_ATTEMPTS = 5


def manifest_file_text(manifest: dict) -> str:
    """The exact text committed for a manifest: its desired state (no server-set fields) as YAML
    with sorted keys. The portal's plan renders manifests with this same function, so what an
    approver saw is byte for byte what is committed."""
    return yaml.safe_dump(desired_state(manifest), sort_keys=True)


class GitOpsBackend(DeliveryBackend):
    """Delivery backend committing to Git; see the module docstring."""

    name = "gitops"
    syncs_gitops = False  # it is the repository: nothing to sync from
    simulates_traffic = False  # Argo CD delivers; traffic is the cluster's own
    # Nodes and bindings are the cluster's, not desired state to commit: Kiln's simulated
    # Karpenter and kube-scheduler do not write through a repository.
    simulates_scheduling = False

    def __init__(
        self,
        repo: str,
        *,
        branch: str = "main",
        work_dir: Path | None = None,
        observer: DeliveryBackend | None = None,
        refresher: ArgoCDRefresher | None = None,
    ) -> None:
        self.repo = repo
        self.refresher = refresher
        self.last_revision = ""  # the commit the last push made, and when (time.time())
        self.last_pushed_at = 0.0
        self.branch = branch
        digest = hashlib.sha256(repo.encode()).hexdigest()[:12]
        self.work_dir = Path(work_dir or Path(settings.VAR_DIR) / "gitops-work" / digest)
        self.observer = observer
        # An observer without Argo CD (the simulated cluster) gets each commit applied here.
        self.syncs = observer is not None and not observer.syncs_gitops

    @classmethod
    def from_settings(cls, *, observer: DeliveryBackend | None) -> GitOpsBackend:
        """KILN_GITOPS_REPO (default: a bare repository under VAR_DIR) and KILN_GITOPS_BRANCH."""
        return cls(
            str(getattr(settings, "KILN_GITOPS_REPO", "") or Path(settings.VAR_DIR) / "gitops.git"),
            branch=getattr(settings, "KILN_GITOPS_BRANCH", "main"),
            observer=observer,
            refresher=ArgoCDRefresher.from_settings(),
        )

    # --- git plumbing -------------------------------------------------------------

    def _git(
        self, *args: str, cwd: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["git", *AUTHOR, *args],
            cwd=cwd or self.work_dir,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
        if check and result.returncode != 0:
            raise DeliveryError(
                f"git {args[0]} failed: {result.stderr.strip()[:300]}", retryable=True
            )
        return result

    def _ensure_repo(self) -> None:
        local = not any(self.repo.startswith(p) for p in ("http://", "https://", "ssh://", "git@"))
        path = Path(self.repo.removeprefix("file://"))
        if local and not (path / "HEAD").exists():
            path.mkdir(parents=True, exist_ok=True)
            self._git("init", "--bare", "-q", "-b", self.branch, str(path), cwd=path)
        if not (self.work_dir / ".git").exists():
            self.work_dir.mkdir(parents=True, exist_ok=True)
            self._git("init", "-q", "-b", self.branch)
            self._git("remote", "add", "origin", self.repo)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.work_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(str(self.work_dir) + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._ensure_repo()
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _sync_from_remote(self) -> None:
        self._git("fetch", "-q", "origin")
        if (
            self._git(
                "rev-parse", "--verify", "-q", f"origin/{self.branch}", check=False
            ).returncode
            == 0
        ):
            self._git("checkout", "-q", "-B", self.branch, f"origin/{self.branch}")
            self._git("reset", "-q", "--hard", f"origin/{self.branch}")
            self._git("clean", "-q", "-fd")

    def _commit_and_push(self, message: str, change) -> bool:
        """Run `change()` on a fresh tree, commit if anything changed, push; retry on a race.

        After a push (outside the work tree's lock) Argo CD is asked to refresh, when one is
        configured, so it syncs now rather than at its next poll."""
        for _ in range(PUSH_ATTEMPTS):
            self._sync_from_remote()
            change()
            self._git("add", "-A")
            if self._git("diff", "--cached", "--quiet", check=False).returncode == 0:
                return False
            self._git("commit", "-q", "-m", message)
            if (
                self._git("push", "-q", "origin", f"HEAD:{self.branch}", check=False).returncode
                == 0
            ):
                self.last_pushed_at = time.time()
                self.last_revision = self._git("rev-parse", "HEAD").stdout.strip()
                return True
        raise DeliveryError(
            f"could not push to {self.repo} after {PUSH_ATTEMPTS} attempts", retryable=True
        )

    def _refresh(self, pushed: bool) -> None:
        if pushed and self.refresher is not None:
            self.refresher.refresh()

    # --- layout -------------------------------------------------------------------

    @staticmethod
    def environment_of(manifest: dict) -> str:
        """The directory an object belongs to."""
        metadata = manifest.get("metadata") or {}
        return (
            (metadata.get("labels") or {}).get(ENV_LABEL) or metadata.get("namespace") or "_cluster"
        )

    @staticmethod
    def file_name(ref: AppliedRef) -> str:
        group = ref.api_version.rpartition("/")[0] or "core"
        return f"{group}_{ref.kind}_{ref.namespace or '_'}_{ref.name}.yaml".lower()

    def _path(self, ref: AppliedRef, environment: str) -> Path:
        return self.work_dir / "environments" / environment / "platform" / self.file_name(ref)

    def _find(self, ref: AppliedRef) -> Path | None:
        matches = list((self.work_dir / "environments").glob(f"*/platform/{self.file_name(ref)}"))
        return matches[0] if matches else None

    # --- interface ------------------------------------------------------------------

    def apply(self, manifests: list[dict], *, field_manager: str = "kiln") -> list[AppliedRef]:
        """Commit the manifests (one commit, none if unchanged), then let the observer sync them."""
        refs = [ref_of(m) for m in manifests]
        texts = [manifest_file_text(m) for m in manifests]

        def change() -> None:
            for ref, manifest, text in zip(refs, manifests, texts, strict=True):
                path = self._path(ref, self.environment_of(manifest))
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)

        envs = sorted({self.environment_of(m) for m in manifests})
        with self._locked():
            pushed = self._commit_and_push(
                f"{field_manager}: apply {len(refs)} objects for {', '.join(envs)}", change
            )
        self._refresh(pushed)
        if self.syncs:
            return self.observer.apply(manifests, field_manager="argocd-controller")
        return refs

    def delete(self, ref: AppliedRef) -> bool:
        """Remove the object's file (Argo CD prunes it); True if it was in the repository."""
        found = {"file": False}

        def change() -> None:
            path = self._find(ref)
            if path is not None:
                path.unlink()
                found["file"] = True

        with self._locked():
            pushed = self._commit_and_push(f"kiln: delete {ref}", change)
        self._refresh(pushed)
        existed = found["file"]
        if self.observer is not None and self.syncs:
            existed = self.observer.delete(ref) or existed
        return existed

    def desired(self, ref: AppliedRef) -> dict | None:
        """The object as committed in the repository (None if not there)."""
        with self._locked():
            self._sync_from_remote()
            path = self._find(ref)
            return yaml.safe_load(path.read_text()) if path else None

    def describe(self, refs: list[AppliedRef]) -> list[ObjectState]:
        """Each object's committed state against the observed cluster's, Argo CD style: one read
        of the repository for all of them (`kiln.cluster.tree`)."""
        with self._locked():
            self._sync_from_remote()
            paths = [self._find(ref) for ref in refs]
            desired = [yaml.safe_load(path.read_text()) if path else None for path in paths]
        if self.observer is None:
            unknown = Health(HealthStatus.PROGRESSING, "no observer configured: health unknown")
            return [
                ObjectState(ref, unknown, SyncStatus.UNKNOWN, "no cluster is observed")
                for ref in refs
            ]
        return [
            state_of(ref, self.observer.get(*ref.key), desired=want, tracks_desired=True)
            for ref, want in zip(refs, desired, strict=True)
        ]

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        """The live object as the observer sees it (falls back to the committed one without an observer)."""
        if self.observer is not None:
            return self.observer.get(api_version, kind, namespace, name)
        return self.desired(AppliedRef(api_version, kind, namespace or "", name))

    def list_query(self, query: ListQuery) -> list[dict]:
        """Live objects as the observer sees them (none without an observer)."""
        return self.observer.list_query(query) if self.observer is not None else []

    def health(self, ref: AppliedRef) -> Health:
        """Health read back from the cluster; Progressing while committed but not yet synced."""
        if self.observer is None:
            return Health(
                HealthStatus.PROGRESSING, "no observer configured: committed, health unknown"
            )
        health = self.observer.health(ref)
        if health.status == HealthStatus.MISSING and self.desired(ref) is not None:
            return Health(HealthStatus.PROGRESSING, "committed; waiting for Argo CD to sync")
        return health

    def list_kinds(self, kinds: Sequence[tuple[str, str]], namespace: str) -> list[dict]:
        """Live objects as the observer sees them (none without an observer)."""
        if self.observer is None:
            return []
        return self.observer.list_kinds(kinds, namespace)

    def health_many(self, refs: list[AppliedRef]) -> list[Health]:
        """Health of each object, as `health` reads it."""
        return [self.health(ref) for ref in refs]

    def lock_namespace(self, *, namespace: str) -> AbstractContextManager[None]:
        """Nothing to hold: writes that reach a cluster are checked there by resourceVersion."""
        return nullcontext()

    def carry_out_pod_kill(self, *, namespace: str, pods: list[str]) -> list[str]:
        """Nothing: Argo CD syncs the PodChaos and the cluster's Chaos Mesh kills the pods."""
        return []

    def lease_mirror(self, *, namespace: str, name: str) -> LeaseMirror | None:
        """None: a Lease is live coordination, not desired state to commit; the database lease holds."""
        return None

    def update_status(self, updates: list[tuple[AppliedRef, dict[str, Any]]]) -> int:
        """Status is the cluster's, never committed: written to the observer (0 without one)."""
        return self.observer.update_status(updates) if self.observer is not None else 0

    def bind_pods(self, bindings: list[PodBinding]) -> int:
        """Bindings are the cluster's, never committed: made on the observer (0 without one)."""
        return self.observer.bind_pods(bindings) if self.observer is not None else 0

    def annotate(self, ref: AppliedRef, annotations: dict[str, str | None]) -> bool:
        """A mark on a live object (a Node Karpenter made) is the cluster's, never committed:
        made on the observer (False without one)."""
        return self.observer.annotate(ref, annotations) if self.observer is not None else False

    def scale(self, ref: AppliedRef, replicas: int) -> int | None:
        """A team's workload is not Kiln's desired state to commit: scaled on the observer, as
        `kubectl scale` would (None without one)."""
        return self.observer.scale(ref, replicas) if self.observer is not None else None

    def write_secret(
        self, *, namespace: str, name: str, data: dict[str, str], labels: dict[str, str]
    ) -> AppliedRef:
        """A credential is never committed: written to the observed cluster, outside the repository."""
        if self.observer is None:
            raise DeliveryError(
                f"Secret {namespace}/{name} is not committed to Git and no cluster is observed "
                "to write it to (set KILN_GITOPS_OBSERVER)",
                retryable=False,
            )
        return self.observer.write_secret(namespace=namespace, name=name, data=data, labels=labels)

    def tenant(self, *, namespace: str, name: str) -> DeliveryBackend | None:
        """The tenant API server as the observed cluster reaches it (None without an observer)."""
        return self.observer.tenant(namespace=namespace, name=name) if self.observer else None
