"""Finding the simulated cluster's rows by an object's reference: one lookup for every module."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q

from kiln.cluster.base import AppliedRef
from kiln.cluster.models import SimulatedObject


def ref_lookup(ref: AppliedRef) -> dict[str, str]:
    """The field lookups naming one object's row within its cluster."""
    return {
        "api_version": ref.api_version,
        "kind": ref.kind,
        "namespace": ref.namespace,
        "name": ref.name,
    }


def any_of(refs: Iterable[AppliedRef]) -> Q:
    """A filter matching the rows of any of `refs` (one query for many objects)."""
    keys = Q()
    for ref in refs:
        keys |= Q(**ref_lookup(ref))
    return keys


def locked_row(*, cluster: str, ref: AppliedRef, live_only: bool = False) -> SimulatedObject | None:
    """The object's row under its row lock (call inside a transaction), or None; `live_only`
    leaves out an object being deleted."""
    rows = SimulatedObject.objects.select_for_update().filter(cluster=cluster, **ref_lookup(ref))
    if live_only:
        rows = rows.filter(deletion_timestamp__isnull=True)
    return rows.first()
