"""The delivery backends behind one interface, and `get_backend`, which picks the configured one.

Every part of Kiln that changes a cluster (environment provisioning and
teardown, canary traffic shifting, chaos faults and leases) goes through the
`DeliveryBackend` protocol (`kiln/cluster/base.py`), so the same code runs
against a real cluster, a GitOps repository or the in-process simulated cluster:

    from kiln.cluster import AppliedRef, Conflict
    from kiln.cluster.backends import get_backend

    backend = get_backend()                       # settings.KILN_DELIVERY_BACKEND
    refs = backend.apply([vs_manifest, dr_manifest])   # -> list[AppliedRef]
    obj = backend.get("networking.istio.io/v1", "VirtualService", "shop", "checkout")
    backend.list("v1", "Namespace", label_selector="kiln.dev/team=payments")
    backend.health(refs[0]); backend.health_many(refs); backend.delete(refs[0])
    with backend.lock_namespace(namespace="shop"):          # read-modify-write, precondition on
        obj["metadata"]["resourceVersion"]        # resourceVersion: a stale one -> Conflict

Backends (``settings.KILN_DELIVERY_BACKEND``):

- ``simulated``: a DB-backed cluster (``kiln.cluster.models.SimulatedObject``)
  every process shares; delays per kind (``KILN_SIM_DELAY_PROFILE``,
  ``KILN_SIM_DELAY_SCALE``, ``KILN_SIM_FINALIZER_SECONDS``) and failures injected
  with ``kiln.cluster.simulated_failures.inject_failure``.
- ``kubernetes``: server-side apply (field manager ``kiln``, force) through the
  official ``kubernetes`` client (``KILN_KUBE_API_URL`` and token/CA files, else
  in-cluster, else kubeconfig).
- ``gitops``: commits each environment's manifests into ``KILN_GITOPS_REPO``
  (branch ``KILN_GITOPS_BRANCH``) that Argo CD syncs, and reads back from the
  ``KILN_GITOPS_OBSERVER`` backend.

The contract each backend keeps, and how it is tested, is in docs/cluster.md.
"""

from __future__ import annotations

from django.conf import settings

from kiln.cluster.base import DeliveryError
from kiln.cluster.gitops import GitOpsBackend
from kiln.cluster.protocol import DeliveryBackend
from kiln.cluster.simulated import SimulatedBackend

__all__ = ["BACKENDS", "get_backend"]

BACKENDS = ("simulated", "kubernetes", "gitops")


def get_backend(name: str | None = None) -> DeliveryBackend:
    """Return the delivery backend named by `name` or settings.KILN_DELIVERY_BACKEND."""
    name = name or getattr(settings, "KILN_DELIVERY_BACKEND", "simulated")
    if name == "simulated":
        return SimulatedBackend()
    if name == "kubernetes":
        # The client library (with its models, pydantic and oauthlib) is loaded only by a
        # process that delivers to a cluster, not at every other start (docs/operations.md).
        from kiln.cluster.kubernetes import KubernetesBackend

        return KubernetesBackend.from_settings()
    if name == "gitops":
        observer = get_backend(getattr(settings, "KILN_GITOPS_OBSERVER", "simulated"))
        return GitOpsBackend.from_settings(observer=observer)
    raise DeliveryError(
        f"unknown delivery backend {name!r}; use one of {', '.join(BACKENDS)}", retryable=False
    )
