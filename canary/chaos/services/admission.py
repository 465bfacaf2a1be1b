"""What an experiment must pass to be admitted: no engaged lever, no overlapping experiment,
and a client's Idempotency-Key that makes a resubmission the same experiment.

`experiment_create` (services/experiments.py) calls `admission_check` inside the transaction
that inserts the experiment, after `lever_require_released` locked the platform's and the
team's lever rows: every creation takes the platform row's lock, so two creations serialize
there and the overlap look-up of the second sees the first (no two overlapping experiments
are admitted together). No network read happens under these locks: the namespace's owner
was read from the cluster before the transaction began.

Overlap (canary/chaos/overlap.py): same namespace with selectors that can match one pod, or
the same service host faulted by two HTTP faults (`faulted_service`: another fault's Service
only names its stops' metrics), at overlapping times. A running experiment occupies
[started_at, started_at + max_duration); a scheduled one (pending) occupies the window it
would if it started now, as the new one does.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from canary.chaos.models import HTTP_FAULTS, ChaosExperiment, ExperimentStatus
from canary.chaos.overlap import Target, overlap_reason
from kiln.errors import Conflict, IdempotencyKeyReused, InvalidInput, NotFound
from kiln.identity.permissions import Actor, can_view_chaos

MAX_KEY_LENGTH = 200


class ExperimentOverlaps(Conflict):
    """The target overlaps another experiment's, and the two do not both allow it."""

    code = "chaos_overlap"


def definition_hash(data: dict[str, Any]) -> str:
    """SHA-256 of an experiment definition, every field in canonical order (what a key is bound
    to: a resubmission must carry the same definition, whatever its fault kind's fields)."""
    canonical = json.dumps(
        {k: v for k, v in data.items() if v is not None},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_key(key: str) -> str:
    """The key, stripped; a 400 naming `Idempotency-Key` when it is too long."""
    key = (key or "").strip()
    if len(key) > MAX_KEY_LENGTH or "\x00" in key:
        raise InvalidInput(
            f"Idempotency-Key is at most {MAX_KEY_LENGTH} characters.",
            extra={"fields": {"idempotency_key": [f"at most {MAX_KEY_LENGTH} characters"]}},
        )
    return key


def experiment_for_key(*, actor: Actor, key: str, digest: str) -> ChaosExperiment | None:
    """The experiment this caller created before with this key, if any; the key reused with
    another definition is a 422 (naming the experiment only to one who may see it).

    A replay answers as a GET by the same caller would, decided now: one who can no longer
    see the experiment (moved to another team, lost the role) gets the GET's 404."""
    if not key:
        return None
    previous = (
        ChaosExperiment.objects.select_related("team")
        .filter(created_by_name=actor.username, idempotency_key=key)
        .first()
    )
    if previous is not None and previous.body_sha256 != digest:
        visible = can_view_chaos(actor, previous.team.slug)
        raise IdempotencyKeyReused(
            "this Idempotency-Key was already used with a different experiment",
            extra={"experiment": str(previous.pk)} if visible else {},
        )
    if previous is not None and not can_view_chaos(actor, previous.team.slug):
        raise NotFound("No such experiment.")
    return previous


def _window(exp: ChaosExperiment, now: datetime) -> tuple[datetime, datetime]:
    start = exp.started_at or now
    if exp.status == ExperimentStatus.PENDING:
        start = max(exp.created_at, now)
    return start, start + timedelta(seconds=exp.max_duration_seconds)


def faulted_service(fault: str, service: str) -> str:
    """The service host an experiment faults: its Service for an HTTP fault, none otherwise
    (a pod or network fault's Service only says where its stops read their metrics)."""
    return service if fault in HTTP_FAULTS else ""


def overlap_check(
    *,
    namespace: str,
    selector: dict[str, Any],
    fault: str,
    service: str,
    max_duration_seconds: int,
    may_overlap: bool,
    now: datetime,
) -> None:
    """Refuse (409 naming the other experiment) a target that overlaps a running or scheduled
    experiment's, unless both allow overlaps. Call under the lever lock (module docstring)."""
    host = faulted_service(fault, service)
    new = Target(
        namespace=namespace,
        selector=selector,
        service=host,
        start=now,
        end=now + timedelta(seconds=max_duration_seconds),
    )
    place = Q(namespace=namespace)
    if host:
        place |= Q(service=host, fault__in=HTTP_FAULTS)
    candidates = ChaosExperiment.objects.filter(
        place, status__in=(ExperimentStatus.RUNNING, ExperimentStatus.PENDING)
    )
    for other in candidates.order_by("created_at"):
        start, end = _window(other, now)
        reason = overlap_reason(
            new,
            Target(
                other.namespace,
                other.selector,
                faulted_service(other.fault, other.service),
                start,
                end,
            ),
        )
        if reason is None or (may_overlap and other.may_overlap):
            continue
        if may_overlap:
            rule = "this one allows overlaps but the other does not: both must say they may"
        elif other.may_overlap:
            rule = "the other allows overlaps but this one does not: both must say they may"
        else:
            rule = "neither allows overlaps"
        raise ExperimentOverlaps(
            f"the target overlaps experiment {other.name} ({other.pk}, {other.status}): "
            f"{reason}; {rule}",
            extra={
                "experiment": str(other.pk),
                "name": other.name,
                "reason": reason,
                "fields": {"may_overlap": [rule]},
            },
        )
