"""The chaos controller: hold an experiment's lease, inject while held, revert before it can lapse.

Runs as the Celery task `chaos.tasks.chaos_run_controller` or as
`manage.py chaos_controller --experiment ID`; a SIGKILLed controller's fault
is removed by the reaper (canary/chaos/reaper.py).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from canary.chaos.leases import LeaseTimings, must_stop_injecting, remaining_before_stop
from canary.chaos.models import ChaosExperiment, ExperimentStatus
from canary.chaos.selectors import live_injection_of, timings_of
from canary.chaos.services import (
    LEVER_NOTICE,
    LeaseNotHeld,
    delivery_backend,
    experiment_end,
    experiment_notice,
    fault_inject,
    fault_lease_acquire,
    fault_lease_release,
    fault_lease_renew,
    fault_revert,
)
from canary.chaos.stop_signals import stop_conditions_check
from kiln import changes
from kiln.errors import Conflict, IllegalTransition, NotFound
from kiln.identity.permissions import system_actor

log = logging.getLogger("kiln.chaos")

# Every controller of this process stops when the process does (standalone's in-process worker):
# each reverts its fault and gives its lease up, rather than hold Kiln's stop until its
# experiment ends. The experiment stays running; `controllers_resume` picks it up again.
_STOPPING = threading.Event()
_WAKES: set[threading.Event] = set()
_WAKES_LOCK = threading.Lock()


def stop_every_controller(timeout: float = 10.0) -> bool:
    """Ask every controller of this process to revert, release and return "stopped" now, and
    wait up to `timeout` seconds until they have (so their audit events are written before the
    process's other services stop); False if some had not."""
    _STOPPING.set()
    with _WAKES_LOCK:
        for wake in _WAKES:
            wake.set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with _WAKES_LOCK:
            if not _WAKES:
                return True
        time.sleep(0.02)
    return False


def allow_controllers() -> None:
    """Controllers may run again in this process (after `stop_every_controller`)."""
    _STOPPING.clear()


def controller_identity(prefix: str = "controller") -> str:
    """A holder identity unique to this process and call: `<prefix>:<host>:<pid>:<random>`."""
    return f"{prefix}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class ControllerHooks:
    """Seams around what leaves the process: a predicate that says the store is unreachable, an event sink."""

    partitioned: Callable[[], bool] = lambda: False
    on_event: Callable[[str, dict[str, Any]], None] = lambda what, data: None


def chaos_controller_run(
    *,
    experiment_id: Any,
    holder: str | None = None,
    stop: threading.Event | None = None,
    backend: Any = None,
    hooks: ControllerHooks | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Hold the lease, inject while held, revert before it can lapse, end the experiment; returns the outcome.

    An abort, a safety lever or a stop condition ending the experiment in another process
    wakes the loop at once (a change notice on the experiment), so its fault is reverted
    then, not at the next renewal; a lost notice waits for the renewal, never longer.
    """
    wake = threading.Event()
    changes.listen(experiment_notice(experiment_id), wake)
    changes.listen(LEVER_NOTICE, wake)  # one notice wakes every controller a lever stops
    with _WAKES_LOCK:
        _WAKES.add(wake)
    try:
        return _controller_loop(
            experiment_id=experiment_id,
            holder=holder,
            stop=stop,
            wake=wake,
            backend=backend,
            hooks=hooks,
            clock=clock,
        )
    finally:
        with _WAKES_LOCK:
            _WAKES.discard(wake)
        changes.unlisten(experiment_notice(experiment_id), wake)
        changes.unlisten(LEVER_NOTICE, wake)


def _controller_loop(
    *,
    experiment_id: Any,
    holder: str | None,
    stop: threading.Event | None,
    wake: threading.Event,
    backend: Any,
    hooks: ControllerHooks | None,
    clock: Callable[[], float],
) -> str:
    holder = holder or controller_identity()
    hooks = hooks or ControllerHooks()
    backend = delivery_backend(backend)
    actor = system_actor("chaos-controller")
    term: int | None = None
    last_renew = 0.0
    try:
        exp = ChaosExperiment.objects.get(pk=experiment_id)
    except ChaosExperiment.DoesNotExist as exc:
        raise NotFound("No such experiment.") from exc
    timings = timings_of(exp)

    def give_up(reason: str) -> None:
        nonlocal term
        live = live_injection_of(experiment_id)
        if live is not None and live.holder == holder:
            fault_revert(injection_id=live.pk, actor=actor, reason=reason, backend=backend)
            hooks.on_event("reverted", {"holder": holder, "reason": reason})
        term = None

    while True:
        close_old_connections()
        if (stop is not None and stop.is_set()) or _STOPPING.is_set():
            if term is not None:
                held = term
                give_up("controller stopped")
                fault_lease_release(experiment_id=experiment_id, holder=holder, term=held)
            return "stopped"
        try:
            exp.refresh_from_db()
            if exp.is_terminal:
                if term is not None:
                    held = term
                    give_up(f"experiment {exp.status}")
                    fault_lease_release(experiment_id=experiment_id, holder=holder, term=held)
                return exp.status
            if term is None:
                attempt = clock()
                if not hooks.partitioned():
                    term = fault_lease_acquire(experiment_id=experiment_id, holder=holder)
                if term is not None:
                    last_renew = attempt
                    hooks.on_event("acquired", {"holder": holder, "term": term})
            else:
                attempt = clock()
                renewed = False
                if not hooks.partitioned():
                    renewed = fault_lease_renew(
                        experiment_id=experiment_id, holder=holder, term=term
                    )
                    if not renewed:
                        give_up("lease lost to another holder")
                        hooks.on_event("lost", {"holder": holder})
                if renewed:
                    last_renew = attempt
                elif term is not None and must_stop_injecting(last_renew, clock(), timings):
                    give_up("renew deadline passed")
                    hooks.on_event("deadline", {"holder": holder})
            if term is not None:
                outcome = _holder_duties(
                    exp, holder, term, last_renew, timings, backend, clock, hooks
                )
                if outcome is not None:
                    return outcome
        except DatabaseError:
            log.warning("chaos controller %s cannot reach the database", holder, exc_info=True)
            if term is not None and must_stop_injecting(last_renew, clock(), timings):
                try:
                    give_up("renew deadline passed (database unreachable)")
                except Exception:  # noqa: BLE001 - the reaper reverts what we cannot
                    term = None
        # Nothing held while waiting: the connection goes back to the process's pool, so many
        # controllers in one process (worker threads) share a few connections.
        close_old_connections()
        _pause(stop, wake, timings.retry_period)


def _pause(stop: threading.Event | None, wake: threading.Event, seconds: float) -> None:
    """Sleep until the next renewal, or until `stop` is set or a notice sets `wake`."""
    deadline = time.monotonic() + seconds
    while not wake.is_set() and (stop is None or not stop.is_set()) and not _STOPPING.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        wake.wait(min(left, 0.05) if stop is not None else left)
    wake.clear()


def _holder_duties(
    exp: ChaosExperiment,
    holder: str,
    term: int,
    last_renew: float,
    timings: LeaseTimings,
    backend: Any,
    clock: Callable[[], float],
    hooks: ControllerHooks,
) -> str | None:
    """While holding: end the experiment on time, abort on a stop condition, inject if not yet."""
    actor = system_actor("chaos-controller")
    now = timezone.now()
    if exp.started_at and now >= exp.started_at + timedelta(seconds=exp.duration_seconds):
        experiment_end(
            experiment_id=exp.pk,
            to=ExperimentStatus.COMPLETED,
            actor=actor,
            reason="duration elapsed",
            backend=backend,
        )
        fault_lease_release(experiment_id=exp.pk, holder=holder, term=term)
        return ExperimentStatus.COMPLETED
    # Every renewal reads the stop conditions (outside any transaction) and judges them.
    verdict = stop_conditions_check(exp)
    if verdict.aborts:
        experiment_end(
            experiment_id=exp.pk,
            to=ExperimentStatus.ABORTED,
            actor=actor,
            reason=f"stop condition: {verdict.reason}",
            backend=backend,
            evidence=verdict.evidence(),
        )
        fault_lease_release(experiment_id=exp.pk, holder=holder, term=term)
        hooks.on_event("aborted", {"holder": holder, "reason": verdict.reason})
        return ExperimentStatus.ABORTED
    live = live_injection_of(exp.pk)
    if live is not None and (live.holder, live.fencing_token) != (holder, term):
        # A fault of an earlier term: its holder lost the lease, so the new holder removes it.
        fault_revert(injection_id=live.pk, actor=actor, reason="lease term ended", backend=backend)
        live = None
    # Inject only with enough time left to revert before the deadline.
    if live is None and remaining_before_stop(last_renew, clock(), timings) > timings.revert_budget:
        try:
            fault_inject(experiment_id=exp.pk, holder=holder, term=term, backend=backend)
            hooks.on_event("injected", {"holder": holder, "term": term})
        except (LeaseNotHeld, Conflict, IllegalTransition) as exc:
            log.info("chaos controller %s did not inject: %s", holder, exc)
    return None
