"""A chaos experiment's fault merged into a live VirtualService (pure: no Django, no backend).

The rules of a VirtualService's fault entries are shared with rollouts, so they live
in `canary.faults` and are re-exported here; `with_fault` is the experiment's own part.
The read-modify-write around these functions is `canary.routes`.
"""

from __future__ import annotations

from typing import Any

from canary.chaos.manifests import FaultSpec, fault_body
from canary.faults import (
    ANNOTATION_FAULTS,
    LABEL_MERGED,
    FaultConflict,
    FaultEffect,
    as_int,
    canonical_host,
    carry_faults,
    duration_ms,
    fault_effect,
    fault_entries,
    is_live,
    is_namespace_local,
    is_standalone_fault,
    may_carry_faults,
    object_ref,
    owner_of,
    owns,
    put_fault,
    route_key,
    routes_host,
    set_entries,
    without_fault,
    writable,
)
from canary.traffic import EXPORT_TO

__all__ = [
    "ANNOTATION_FAULTS",
    "LABEL_MERGED",
    "FaultConflict",
    "FaultEffect",
    "as_int",
    "canonical_host",
    "carry_faults",
    "duration_ms",
    "fault_effect",
    "fault_entries",
    "is_live",
    "is_namespace_local",
    "is_standalone_fault",
    "may_carry_faults",
    "object_ref",
    "owner_of",
    "owns",
    "put_fault",
    "route_key",
    "routes_host",
    "set_entries",
    "with_fault",
    "without_fault",
    "writable",
]


def with_fault(vs: dict[str, Any], spec: FaultSpec, token: int) -> dict[str, Any]:
    """The VirtualService with `spec`'s fault in every http route, owned by (experiment, token)."""
    manifest = writable(vs)
    body = fault_body(spec)
    ((key, value),) = body.items()
    put_fault(manifest, key, value, spec.experiment_id, token)
    # What Kiln writes stays in its namespace (a rollout object written before exportTo was set).
    manifest["spec"]["exportTo"] = list(EXPORT_TO)
    return manifest
