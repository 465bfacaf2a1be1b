"""What `DeliveryBackend.describe` answers: each object's health, sync state and recent events.

Pure functions over live objects (and, for a backend that keeps desired state apart from the
cluster, the committed one), so every backend reads sync and events the same way.

Sync, as Argo CD reports it: `Synced` when the live object carries every field the desired
state sets, `OutOfSync` when a field differs, the object is desired but absent, or live but
no longer desired. A backend that applies straight to the cluster has no desired state apart
from what it applied: there an object is Synced while it is live and OutOfSync once it is gone.

Events are read from the object itself (creation, each status condition's last transition,
deletion), newest first: every backend serves them with the read it already makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kiln.cluster.base import AppliedRef, Health, HealthStatus, health_of

RECENT_EVENTS = 5


class SyncStatus(StrEnum):
    """Whether the live object matches its desired state."""

    SYNCED = "Synced"
    OUT_OF_SYNC = "OutOfSync"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class ObjectEvent:
    """One thing that happened to an object: when (RFC 3339), a reason and a message."""

    at: str
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class ObjectState:
    """One object of an environment as the cluster reports it."""

    ref: AppliedRef
    health: Health
    sync: SyncStatus
    sync_message: str = ""
    events: tuple[ObjectEvent, ...] = ()


def events_of(obj: dict[str, Any] | None, limit: int = RECENT_EVENTS) -> tuple[ObjectEvent, ...]:
    """The object's recent events, newest first: deletion, condition transitions, creation."""
    if not obj:
        return ()
    metadata = obj.get("metadata") or {}
    found: list[ObjectEvent] = []
    if metadata.get("creationTimestamp"):
        found.append(ObjectEvent(str(metadata["creationTimestamp"]), "Created", "object created"))
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if not isinstance(condition, dict) or not condition.get("lastTransitionTime"):
            continue
        kind = str(condition.get("type") or "Condition")
        status = str(condition.get("status") or "Unknown")
        message = str(condition.get("message") or condition.get("reason") or "")
        found.append(
            ObjectEvent(
                str(condition["lastTransitionTime"]),
                f"{kind}={status}",
                message,
                warning=status == "False",
            )
        )
    if metadata.get("deletionTimestamp"):
        found.append(
            ObjectEvent(str(metadata["deletionTimestamp"]), "Deleting", "deletion requested")
        )
    # Newest first; events stamped in the same second keep the order they happen in, so an
    # object's creation is always the oldest entry.
    order = {id(event): index for index, event in enumerate(found)}
    found.sort(key=lambda e: (e.at, order[id(e)]), reverse=True)
    return tuple(found[:limit])


def _contains(live: Any, desired: Any) -> bool:
    """True if `live` carries every field `desired` sets, with the same value."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            key in live and _contains(live[key], value) for key, value in desired.items()
        )
    return live == desired


def _drift(live: dict[str, Any], desired: dict[str, Any]) -> list[str]:
    """The desired top-level fields (metadata's labels and annotations included) the live
    object does not match."""
    fields = [key for key in desired if key not in ("apiVersion", "kind", "metadata", "status")]
    differ = [key for key in fields if not _contains(live.get(key), desired[key])]
    for key in ("labels", "annotations"):
        want = (desired.get("metadata") or {}).get(key) or {}
        if not _contains((live.get("metadata") or {}).get(key) or {}, want):
            differ.append(f"metadata.{key}")
    return differ


def sync_of(
    live: dict[str, Any] | None, desired: dict[str, Any] | None, *, tracks_desired: bool
) -> tuple[SyncStatus, str]:
    """Sync state and why (see the module docstring for the rule)."""
    if not tracks_desired:
        if live is None:
            return SyncStatus.OUT_OF_SYNC, "applied, but not in the cluster"
        return SyncStatus.SYNCED, "applied to the cluster"
    if desired is None and live is None:
        return SyncStatus.SYNCED, "neither desired nor live"
    if desired is None:
        return SyncStatus.OUT_OF_SYNC, "live, but no longer desired (prune pending)"
    if live is None:
        return SyncStatus.OUT_OF_SYNC, "desired, not yet in the cluster"
    differ = _drift(live, desired)
    if differ:
        return SyncStatus.OUT_OF_SYNC, "differs in " + ", ".join(differ)
    return SyncStatus.SYNCED, "live matches desired"


def state_of(
    ref: AppliedRef,
    live: dict[str, Any] | None,
    *,
    desired: dict[str, Any] | None = None,
    tracks_desired: bool = False,
    health: Health | None = None,
) -> ObjectState:
    """One object's state from its live body (and desired state where the backend keeps one)."""
    sync, why = sync_of(live, desired, tracks_desired=tracks_desired)
    if health is None:
        health = health_of(live)
        if health.status == HealthStatus.MISSING and tracks_desired and desired is not None:
            health = Health(HealthStatus.PROGRESSING, "desired; waiting for the cluster to sync")
    return ObjectState(ref, health, sync, why, events_of(live))
