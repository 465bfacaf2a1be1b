"""Disruption safety before teardown, as plain rules: what a workload declares and what the reaper does.

A workload (Deployment, StatefulSet, Job or Pod in the environment's namespace) may declare

- `kiln.dev/terminate-check: /path` (and `kiln.dev/terminate-check-port`, default 8080): an HTTP
  GET the reaper sends at expiry; 2xx means "safe to terminate", anything else (or no answer)
  means "not yet", and a `Retry-After` header in seconds says when to ask again;
- `kiln.dev/do-not-disrupt: <reason>`: "not yet" without asking, for the reason given. An
  empty reason is invalid: the hold is not honoured, and the reaper says so.

Timing invariants (per environment class, `ClassLifecycle`):

    hard_deadline = expires_at + max_deferral
    a deferral ends at min(now + step, hard_deadline), step = Retry-After capped at deferral_step
    at or past hard_deadline teardown starts whatever the workloads answer (a forced disruption)

No Django here: `decide` is a pure function of the clock, the expiry, the answers and the class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

TERMINATE_CHECK = "kiln.dev/terminate-check"
TERMINATE_CHECK_PORT = "kiln.dev/terminate-check-port"
DO_NOT_DISRUPT = "kiln.dev/do-not-disrupt"
DEFAULT_CHECK_PORT = 8080
MIN_STEP_SECONDS = 1.0
MAX_REASON = 500


@dataclass(frozen=True)
class ClassLifecycle:
    """Lifecycle timings of one environment class, in seconds (`idle_after` None: never idle)."""

    failed_grace: float
    max_deferral: float
    deferral_step: float
    warn_before: float
    idle_after: float | None
    idle_grace: float
    # Sleeping: no activity for `sleep_after` puts it to sleep (None: never for inactivity);
    # `may_sleep` False refuses every sleep (a class whose environments must keep serving).
    sleep_after: float | None = None
    may_sleep: bool = True


@dataclass(frozen=True)
class Declaration:
    """What one workload declares about its disruption; `error` says why a declaration is invalid."""

    workload: str
    check_path: str = ""
    check_port: int = DEFAULT_CHECK_PORT
    hold_reason: str = ""
    error: str = ""

    @property
    def holds(self) -> bool:
        return bool(self.hold_reason) and not self.error


@dataclass(frozen=True)
class Answer:
    """A workload's answer to "may it be terminated now?"."""

    workload: str
    ready: bool
    reason: str = ""
    retry_after: float | None = None


class Verdict(StrEnum):
    """What the reaper does with an expired environment."""

    PROCEED = "proceed"  # every workload is ready to terminate
    DEFER = "defer"  # some said "not yet" and the hard deadline is still ahead
    FORCE = "force"  # some said "not yet" but the hard deadline has come


@dataclass(frozen=True)
class Decision:
    """The reaper's decision, until when it defers and who refused."""

    verdict: Verdict
    hard_deadline: datetime
    until: datetime | None = None
    refusing: list[Answer] = field(default_factory=list)


def workload_name(obj: dict[str, Any]) -> str:
    """`Kind/name` of a cluster object."""
    return f"{obj.get('kind', '?')}/{(obj.get('metadata') or {}).get('name', '?')}"


def declaration_of(obj: dict[str, Any]) -> Declaration | None:
    """The disruption declaration in an object's annotations, or None if it declares nothing."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if TERMINATE_CHECK not in annotations and DO_NOT_DISRUPT not in annotations:
        return None
    name = workload_name(obj)
    if DO_NOT_DISRUPT in annotations:
        reason = str(annotations[DO_NOT_DISRUPT] or "").strip()
        if not reason:
            return Declaration(name, error=f"{DO_NOT_DISRUPT} needs a reason; not honoured")
        return Declaration(name, hold_reason=reason[:MAX_REASON])
    path = str(annotations[TERMINATE_CHECK] or "").strip()
    if not path.startswith("/") or any(c.isspace() for c in path) or "//" in path:
        return Declaration(name, error=f"{TERMINATE_CHECK} must be an absolute HTTP path")
    raw_port = str(annotations.get(TERMINATE_CHECK_PORT, DEFAULT_CHECK_PORT))
    if not raw_port.isdigit() or not 1 <= int(raw_port) <= 65535:
        return Declaration(name, error=f"{TERMINATE_CHECK_PORT} must be a port number")
    return Declaration(name, check_path=path, check_port=int(raw_port))


def check_url(template: str, *, service: str, namespace: str, port: int, path: str) -> str:
    """The URL of a terminate check: the template with {service}, {namespace}, {port}, {path}."""
    return template.format(service=service, namespace=namespace, port=port, path=path)


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header given in seconds (RFC 9110 §10.2.3); None if absent or a date."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value.strip())


def hard_deadline(*, expires_at: datetime, lifecycle: ClassLifecycle) -> datetime:
    """When teardown starts whatever the workloads say."""
    return expires_at + timedelta(seconds=lifecycle.max_deferral)


def expiry_warning_at(
    *, expires_at: datetime, began_at: datetime | None, lifecycle: ClassLifecycle
) -> datetime:
    """When the owner is first warned of the expiry: the class's `warn_before` ahead of it, but
    never in the first half of the environment's life (from `began_at`, when it became ready), so
    a TTL no longer than the window is not "expiring" from its first minute."""
    window = expires_at - timedelta(seconds=lifecycle.warn_before)
    if began_at is None:
        return window
    return max(window, began_at + (expires_at - began_at) / 2)


def decide(
    *, now: datetime, expires_at: datetime, answers: list[Answer], lifecycle: ClassLifecycle
) -> Decision:
    """PROCEED if nobody refuses; DEFER one step (never past the hard deadline); FORCE at it."""
    deadline = hard_deadline(expires_at=expires_at, lifecycle=lifecycle)
    refusing = [a for a in answers if not a.ready]
    if not refusing:
        return Decision(Verdict.PROCEED, deadline)
    if now >= deadline:
        return Decision(Verdict.FORCE, deadline, refusing=refusing)
    asked = [a.retry_after for a in refusing if a.retry_after is not None]
    step = min(max(asked), lifecycle.deferral_step) if asked else lifecycle.deferral_step
    until = min(now + timedelta(seconds=max(step, MIN_STEP_SECONDS)), deadline)
    return Decision(Verdict.DEFER, deadline, until=until, refusing=refusing)
