"""The crash benchmark's trials (`manage.py chaos_crash_bench`): a controller holding a fault is
killed with SIGKILL, and the independent reaper process reverts the fault.

Each trial starts an experiment, runs its controller in a child process (a fork of this one,
or `manage.py chaos_controller`), waits until the fault is applied, kills the child at a random
point of its renew cycle, and measures the time from the kill until the reaper has reverted the
fault. Trials go round every fault kind (HTTP delay and abort, pod kill and the Chaos Mesh kinds
of canary/chaos/kinds.py); a revert counts only once the reaper read the cluster back and
confirmed the fault gone.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connections

from bench.chaos.harness import BENCH, child_env, ensure_team, team_namespace
from canary.chaos import actuators, kinds
from canary.chaos.controller import chaos_controller_run, controller_identity
from canary.chaos.models import ChaosInjection, InjectionState
from canary.chaos.services import experiment_create, experiment_end

TEAM = "chaos-bench"
NAMESPACE = "chaos-bench"
FAULTS = ("http-abort", "http-delay", "pod-kill", *sorted(kinds.KINDS))
# A magnitude within each Chaos Mesh kind's bounds (kinds.kind_errors accepts every one).
MAGNITUDES: dict[str, dict[str, Any]] = {
    "network-delay": {"latency_ms": 200, "jitter_ms": 20},
    "network-loss": {"loss_percent": 30.0},
    "network-partition": {"target_selector": {"app": "db"}},
    "cpu-stress": {"cpu_workers": 1, "cpu_load": 50},
    "memory-stress": {"memory_mb": 128},
    "dns-error": {"dns_patterns": ["payments.example.com"]},
    "clock-skew": {"time_offset_seconds": 60},
}


@dataclass
class TrialResult:
    """One crash trial: was the fault reverted, and how long after the kill."""

    fault: str
    reverted: bool
    kill_to_revert_s: float | None
    reverted_by: str
    in_effect_after: bool
    confirmed: bool = False  # the reaper's read-back saw the fault gone
    held_at_kill: bool = True
    starved_terms: int = 0


def ensure_target(backend: Any, *, team: str = TEAM, namespace: str = NAMESPACE) -> None:
    """The bench's team and its namespace in the cluster (idempotent)."""
    ensure_team(team, "Chaos bench")
    backend.apply([team_namespace(namespace, team)])


def ensure_pods(
    backend: Any, *, namespace: str = NAMESPACE, count: int = 4, wait: float = 15.0
) -> None:
    """Pods for the trials that target pods (a kill deletes them; re-applied each trial, once
    the pods a kill is deleting are gone: a deleting object cannot be applied again)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and any(
        (p.get("metadata") or {}).get("deletionTimestamp")
        for p in backend.list("v1", "Pod", namespace, "app=web")
    ):
        time.sleep(0.05)
    backend.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"web-{i}", "namespace": namespace, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]},
            }
            for i in range(count)
        ]
    )


def experiment_data(fault: str, *, namespace: str = NAMESPACE) -> dict[str, Any]:
    """A long experiment (the trial ends it) with a small blast radius."""
    data: dict[str, Any] = {
        "name": f"crash {fault}",
        "namespace": namespace,
        "selector": {"app": "web"},
        "service": "web",
        "fault": fault,
        "duration_seconds": 120,
        "max_duration_seconds": 300,
        "max_pods": 1,
        # 25%: within every kind's blast-radius cap (clock skew's is the smallest).
        "max_percent": 25,
        **MAGNITUDES.get(fault, {}),
    }
    if fault == "http-delay":
        data["delay_ms"] = 250
    if fault == "http-abort":
        data["abort_http_status"] = 503
    return data


def fork_controller(experiment_id: str) -> int:
    """Fork a child running the controller; the parent gets its pid."""
    connections.close_all()
    pid = os.fork()
    if pid == 0:  # child: its own database connection, never returns
        code = 0
        try:
            chaos_controller_run(experiment_id=experiment_id, holder=controller_identity("fork"))
        except BaseException:  # noqa: BLE001 - the child reports by exit code only
            code = 1
        finally:
            os._exit(code)
    return pid


def spawn_controller(experiment_id: str) -> int:
    manage = os.path.join(settings.BASE_DIR, "manage.py")
    proc = subprocess.Popen(
        [sys.executable, manage, "chaos_controller", "--experiment", experiment_id],
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc.pid


def _end(exp: Any, backend: Any, reason: str) -> None:
    experiment_end(experiment_id=exp.pk, to="aborted", actor=BENCH, reason=reason, backend=backend)


def crash_trial(
    fault: str,
    *,
    backend: Any,
    spawn: bool = False,
    rng: random.Random | None = None,
    timeout: float = 30.0,
) -> TrialResult:
    """Start a controller holding `fault`, SIGKILL it once injected, wait for the reaper's revert."""
    rng = rng or random.Random()
    retried = 0
    if not fault.startswith("http-"):
        ensure_pods(backend)
    exp = experiment_create(actor=BENCH, data=experiment_data(fault), backend=backend)
    pid = spawn_controller(str(exp.pk)) if spawn else fork_controller(str(exp.pk))
    try:
        deadline = time.monotonic() + timeout
        injection = None
        while time.monotonic() < deadline:
            candidate = ChaosInjection.objects.filter(
                experiment=exp, state=InjectionState.ACTIVE, reverted_at__isnull=True
            ).first()
            if candidate is not None:
                # Kill at a random point of the renew cycle, while the fault is still held.
                time.sleep(rng.uniform(0, exp.retry_period * 2))
                candidate.refresh_from_db()
                if candidate.reverted_at is None:
                    injection = candidate
                    break
                retried += 1  # the controller was starved past its deadline and reverted: next term
            time.sleep(0.02)
        if injection is None:
            os.kill(pid, signal.SIGKILL)
            # Ended, so a next trial's experiment on the same target is not an overlap.
            _end(exp, backend, "crash trial could not hold its fault")
            raise CommandError(
                f"the controller never held {fault} past the kill point in {timeout:g} s "
                f"({retried} term(s) reverted early: starved past its deadline; "
                f"experiment {exp.pk})"
            )
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    reverted_at = None
    reverted_by = ""
    limit = time.monotonic() + exp.lease_duration * 10 + 10
    while time.monotonic() < limit:
        injection.refresh_from_db()
        if injection.reverted_at is not None:
            reverted_at = injection.reverted_at.timestamp()
            reverted_by = injection.reverted_by
            break
        time.sleep(0.01)
    still = actuators.in_effect(backend, injection.applied)
    confirmed = bool(injection.revert_confirmed) and not actuators.read_back(
        backend, injection.applied
    )
    _end(exp, backend, "crash trial over")
    return TrialResult(
        fault=fault,
        reverted=reverted_at is not None and not still,
        confirmed=confirmed,
        kill_to_revert_s=None if reverted_at is None else round(reverted_at - killed_at, 4),
        reverted_by=reverted_by,
        in_effect_after=still,
        held_at_kill=reverted_at is None or reverted_at >= killed_at,
        starved_terms=retried,
    )


def summarize(results: list[TrialResult], *, lease: float, reaper_period: float) -> dict[str, Any]:
    """Fraction reverted, worst and median kill-to-revert, against the lease + reaper bound."""
    times = [r.kill_to_revert_s for r in results if r.kill_to_revert_s is not None]
    bound = lease + reaper_period
    return {
        "trials": len(results),
        "reverted": sum(r.reverted for r in results),
        "fraction_reverted": round(sum(r.reverted for r in results) / len(results), 4)
        if results
        else 0.0,
        "kill_to_revert_worst_s": max(times) if times else None,
        "kill_to_revert_median_s": round(statistics.median(times), 4) if times else None,
        "kill_to_revert_best_s": min(times) if times else None,
        "bound_s": bound,
        "within_bound": sum(1 for t in times if t <= bound),
        "reverted_by_reaper": sum(1 for r in results if r.reverted_by == "system:chaos-reaper"),
        "lease_duration_s": lease,
        "reaper_period_s": reaper_period,
        "confirmed_reverted": sum(1 for r in results if r.reverted and r.confirmed),
        "by_fault": {
            f: {
                "trials": sum(1 for r in results if r.fault == f),
                "confirmed_reverted": sum(
                    1 for r in results if r.fault == f and r.reverted and r.confirmed
                ),
            }
            for f in FAULTS
        },
        "reverted_before_kill": sum(1 for r in results if not r.held_at_kill),
        "starved_terms": sum(r.starved_terms for r in results),
    }
