"""Delivery backends: one interface that puts Kubernetes objects somewhere and reads them back.

Every part of Kiln that changes a cluster (environment provisioning and
teardown, canary traffic shifting, chaos faults) goes through this interface,
so the same code runs against a real cluster, a GitOps repository or the
in-process simulated cluster.

    from portal.delivery import get_backend, AppliedRef

    backend = get_backend()                       # settings.KILN_DELIVERY_BACKEND
    refs = backend.apply([vs_manifest, dr_manifest])   # -> list[AppliedRef]
    obj = backend.get("networking.istio.io/v1", "VirtualService", "shop", "checkout")
    backend.health(refs[0])                       # -> Health(status, message)
    backend.delete(refs[0])                       # -> True if it existed
    backend.list("v1", "Namespace", label_selector="kiln.dev/team=payments")

Interface (`DeliveryBackend`), generic over any apiVersion/kind:

- ``apply(manifests: list[dict], *, field_manager: str = "kiln") -> list[AppliedRef]``
  Server-side-apply semantics: create the object or replace the fields this
  field manager owns (metadata.labels, metadata.annotations,
  metadata.finalizers, spec and any other top-level field except ``status``).
  ``metadata.generation`` increases only when the desired state changed, so
  applying the same manifest twice is a no-op (idempotent, retry-safe).
  Manifests are applied in the order given; each needs ``apiVersion``,
  ``kind`` and ``metadata.name``; ``metadata.namespace`` is optional ("" means
  cluster-scoped). Invalid manifests raise ``InvalidManifest`` before anything
  is applied; a backend failure raises ``DeliveryError`` (``retryable`` says
  whether a retry may succeed). Applying to an object that is being deleted
  raises ``DeliveryError(retryable=True)``.
- ``get(api_version, kind, namespace, name) -> dict | None``
  The live object as Kubernetes would return it (``apiVersion``, ``kind``,
  ``metadata`` with ``uid``, ``generation``, ``labels``, ``annotations``,
  ``finalizers``, ``deletionTimestamp`` when deleting, ``spec``... and
  ``status``), or None when it does not exist (deleted objects whose
  finalizers cleared are gone). Pass ``namespace=""`` (or None) for
  cluster-scoped kinds.
- ``delete(ref: AppliedRef) -> bool``
  Ask for deletion (foreground): sets ``deletionTimestamp``; the object
  disappears once its finalizers clear. Returns False if it did not exist.
  Idempotent.
- ``list(api_version, kind, namespace=None, label_selector=None) -> list[dict]``
  Live objects of one kind, optionally in one namespace (None: all) and
  filtered by an equality-based label selector (``a=b,c!=d,e,!f``), sorted by
  namespace then name.
- ``health(ref: AppliedRef) -> Health``
  ``Health.status`` is one of ``HEALTHY`` (Ready condition true / synced and
  healthy), ``PROGRESSING`` (not ready yet), ``DEGRADED`` (a failure is
  reported), ``DELETING`` (deletionTimestamp set) or ``MISSING``;
  ``Health.message`` says why.

Backends (``settings.KILN_DELIVERY_BACKEND``):

- ``simulated``: a DB-backed cluster (``portal.models.SimulatedObject``), so
  every process (web, Celery workers, commands) sees the same state. Readiness
  comes after a per-kind delay (``KILN_SIM_DELAY_PROFILE`` zero|fast|realistic,
  scaled by ``KILN_SIM_DELAY_SCALE``); finalizers clear after
  ``KILN_SIM_FINALIZER_SECONDS``. Failures are injected with
  ``portal.delivery.simulated.inject_failure`` (never ready, stuck finalizer,
  apply error). ``SimulatedBackend.set_status`` lets simulations write a status.
- ``kubernetes``: server-side apply (field manager ``kiln``, force) through the
  official ``kubernetes`` client's dynamic client.
- ``gitops``: commits each environment's manifests into a Git repository (one
  directory per namespace) that Argo CD syncs, and reads health back.
"""

from __future__ import annotations

from django.conf import settings

from portal.delivery.base import (
    AppliedRef,
    DeliveryBackend,
    DeliveryError,
    Health,
    HealthStatus,
    InvalidManifest,
    match_labels,
    parse_label_selector,
    ref_of,
)

__all__ = [
    "AppliedRef",
    "DeliveryBackend",
    "DeliveryError",
    "Health",
    "HealthStatus",
    "InvalidManifest",
    "get_backend",
    "match_labels",
    "parse_label_selector",
    "ref_of",
]

BACKENDS = ("simulated", "kubernetes", "gitops")


def get_backend(name: str | None = None) -> DeliveryBackend:
    """Return the delivery backend named by `name` or settings.KILN_DELIVERY_BACKEND."""
    name = name or getattr(settings, "KILN_DELIVERY_BACKEND", "simulated")
    if name == "simulated":
        from portal.delivery.simulated import SimulatedBackend

        return SimulatedBackend()
    if name == "kubernetes":
        from portal.delivery.kubernetes import KubernetesBackend

        return KubernetesBackend.from_settings()
    if name == "gitops":
        from portal.delivery.gitops import GitOpsBackend

        return GitOpsBackend.from_settings()
    raise DeliveryError(
        f"unknown delivery backend {name!r}; use one of {', '.join(BACKENDS)}", retryable=False
    )
