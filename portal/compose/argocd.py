"""Delivery: the Argo CD Application that syncs the team's workloads into the namespace. No
Django."""

from __future__ import annotations

from portal.compose.spec import EnvironmentSpec, metadata

ARGOCD_NAMESPACE = "argocd"


def argocd_application(spec: EnvironmentSpec) -> dict:
    """The Argo CD Application that syncs the team's workloads into the namespace."""
    meta = metadata(spec, spec.namespace, ARGOCD_NAMESPACE)
    meta["finalizers"] = ["resources-finalizer.argocd.argoproj.io"]
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": meta,
        "spec": {
            "project": "default",
            "source": {
                "repoURL": spec.gitops_repo_url,
                "targetRevision": "HEAD",
                "path": f"{spec.gitops_path_prefix}/{spec.namespace}/workloads",
            },
            "destination": {
                "server": "https://kubernetes.default.svc",
                "namespace": spec.namespace,
            },
            "syncPolicy": {
                "automated": {"prune": True, "selfHeal": True},
                "syncOptions": ["ServerSideApply=true", "CreateNamespace=false"],
            },
        },
    }
