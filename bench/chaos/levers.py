"""The safety lever benchmark: from engaging the platform lever to the last fault reverted and
confirmed, with 50 experiments running across teams.

Each run defines `experiments` experiments on `teams` teams' namespaces (HTTP abort, HTTP
delay and pod kill in turn, each on its own service and pods, so none overlaps another),
runs one controller per experiment, five controller threads to a forked process as a worker
process runs them (each process's pool at most three connections: fifty processes with a
pool each took more connections than PostgreSQL's default hundred leave a shared machine),
and waits until every fault is injected. Then, per mode:

- `live`: the controllers keep running; engaging the lever aborts every experiment and
  wakes each controller through its change notice; it reverts and reads the cluster back.
- `controllers_killed`: every controller process is SIGKILLed first; the one independent
  `manage.py chaos_reaper` process (running in both modes, its period `reaper_period`)
  reverts every ended experiment's fault at its next pass and reads it back.

The time of a fault is from the moment before `lever_engage` is called to its injection's
`confirmed_at` (written once the revert was read back through the cluster interface); a
run's figure is its last fault's. After the wait the benchmark reads every fault's objects
back itself (`actuators.in_effect`): `confirmed_reverted` counts faults both confirmed by
Kiln and seen gone by that read.
"""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from bench.chaos.harness import BENCH, ensure_team, team_namespace
from canary.chaos import actuators
from canary.chaos.controller import chaos_controller_run, controller_identity
from canary.chaos.models import ChaosExperiment, ChaosInjection, ChaosLever, InjectionState
from canary.chaos.services import experiment_create, experiment_end, lever_engage, lever_release
from kiln.identity.permissions import PLATFORM_ADMIN, Actor

FAULTS = ("http-abort", "http-delay", "pod-kill")
MODES = ("live", "controllers_killed")
# Engages and releases the lever as a person would: the benchmark's platform admin.
ADMIN = Actor("lever-bench-admin", roles=frozenset({PLATFORM_ADMIN}))


def team_slug(i: int) -> str:
    """Team i's slug, which is also its namespace."""
    return f"lever-bench-{i}"


def ensure_targets(backend: Any, teams: int, experiments: int) -> None:
    """The teams, their namespaces and one pod per experiment (idempotent)."""
    objects: list[dict[str, Any]] = []
    for t in range(teams):
        slug = team_slug(t)
        ensure_team(slug, slug)
        objects.append(team_namespace(slug, slug))
    for i in range(experiments):
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"svc-{i}-0",
                    "namespace": team_slug(i % teams),
                    "labels": {"app": f"svc-{i}"},
                },
                "spec": {"containers": [{"name": "app", "image": "app:1"}]},
            }
        )
    backend.apply(objects)


def experiment_data(i: int, teams: int) -> dict[str, Any]:
    """Experiment i: its own service and pods in team i % teams's namespace, so none overlaps."""
    fault = FAULTS[i % len(FAULTS)]
    data: dict[str, Any] = {
        "name": f"lever {i} {fault}",
        "namespace": team_slug(i % teams),
        "selector": {"app": f"svc-{i}"},
        "service": f"svc-{i}" if fault != "pod-kill" else "",
        "fault": fault,
        "duration_seconds": 600,
        "max_duration_seconds": 900,
        "max_pods": 1,
        "max_percent": 50,
    }
    if fault == "http-delay":
        data["delay_ms"] = 200
    if fault == "http-abort":
        data["abort_http_status"] = 503
    return data


def fork_controllers(experiment_ids: list[str], pool_max: int) -> int:
    """A forked child running one controller thread per experiment, as a worker process runs
    several, until they all end; its database pool holds at most `pool_max` connections (each
    controller borrows one per renewal). The parent gets the child's pid."""
    connections.close_all()
    pid = os.fork()
    if pid == 0:  # child: its own pool (kiln.dbpool drops the parent's), never returns
        code = 0
        try:
            options = connections["default"].settings_dict.get("OPTIONS", {})
            if isinstance(options.get("pool"), dict):
                options["pool"] = {**options["pool"], "min_size": 1, "max_size": pool_max}
            threads = [
                threading.Thread(target=_controller, args=(experiment_id,))
                for experiment_id in experiment_ids
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        except BaseException:  # noqa: BLE001 - the child reports by exit code only
            code = 1
        finally:
            os._exit(code)
    return pid


def _controller(experiment_id: str) -> None:
    try:
        chaos_controller_run(experiment_id=experiment_id, holder=controller_identity("lever"))
    finally:
        connections.close_all()


def _reap_children(pids: list[int], *, kill: bool, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        if kill:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done or time.monotonic() > deadline:
                if not done:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                break
            time.sleep(0.02)


@dataclass
class RunResult:
    """One run of one mode: when each fault was confirmed reverted after the lever."""

    mode: str
    experiments: int
    injected: int
    confirmed: int = 0
    seen_gone: int = 0
    engage_call_s: float = 0.0
    per_fault_s: list[float] = field(default_factory=list)
    reverted_by: dict[str, int] = field(default_factory=dict)

    @property
    def last_s(self) -> float | None:
        return max(self.per_fault_s) if len(self.per_fault_s) == self.injected else None


def _released() -> None:
    lever = ChaosLever.objects.filter(scope="platform").first()
    if lever is not None and lever.engaged:
        lever_release(actor=ADMIN, reason="lever benchmark: next run")


def run_once(
    mode: str,
    *,
    backend: Any,
    teams: int,
    experiments: int,
    timeout: float,
    per_process: int = 5,
    pool_max: int = 3,
) -> RunResult:
    """Start every experiment and its controller (`per_process` controller threads to a forked
    process), engage the platform lever, time the reverts."""
    _released()
    _end_leftovers()
    ensure_targets(backend, teams, experiments)
    exps = [
        experiment_create(actor=BENCH, data=experiment_data(i, teams), backend=backend)
        for i in range(experiments)
    ]
    exp_ids = [str(exp.pk) for exp in exps]
    pids = [
        fork_controllers(exp_ids[i : i + per_process], pool_max)
        for i in range(0, len(exp_ids), per_process)
    ]
    try:
        deadline = time.monotonic() + timeout
        ids = [exp.pk for exp in exps]
        while True:
            active = ChaosInjection.objects.filter(
                experiment_id__in=ids, state=InjectionState.ACTIVE, reverted_at__isnull=True
            ).count()
            if active == experiments or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        injections = list(
            ChaosInjection.objects.filter(
                experiment_id__in=ids, state=InjectionState.ACTIVE, reverted_at__isnull=True
            )
        )
        if mode == "controllers_killed":
            _reap_children(pids, kill=True, timeout=10)
            pids = []
        result = RunResult(mode=mode, experiments=experiments, injected=len(injections))
        engaged = time.time()
        lever_engage(actor=ADMIN, reason=f"lever benchmark ({mode})")
        result.engage_call_s = round(time.time() - engaged, 4)
        wait_until = time.monotonic() + timeout
        pending = {inj.pk for inj in injections}
        while pending and time.monotonic() < wait_until:
            pending = set(
                ChaosInjection.objects.filter(
                    pk__in=pending, confirmed_at__isnull=True
                ).values_list("pk", flat=True)
            )
            if pending:
                time.sleep(0.02)
        for inj in ChaosInjection.objects.filter(pk__in=[i.pk for i in injections]):
            if inj.confirmed_at is not None and inj.revert_confirmed:
                result.per_fault_s.append(round(inj.confirmed_at.timestamp() - engaged, 4))
                result.confirmed += 1
            gone = not actuators.in_effect(backend, inj.applied)
            result.seen_gone += int(gone and inj.confirmed_at is not None)
            by = (inj.reverted_by or "none").split(":")[-1]
            result.reverted_by[by] = result.reverted_by.get(by, 0) + 1
    finally:
        _reap_children(pids, kill=False, timeout=30)
        for exp in exps:
            experiment_end(
                experiment_id=exp.pk, to="aborted", actor=BENCH, reason="lever benchmark over"
            )
        _released()
    return result


def _end_leftovers() -> None:
    """Experiments an interrupted run left running end now (the reaper reverts their faults)."""
    for exp_id in ChaosExperiment.objects.filter(
        team__slug__startswith="lever-bench-", status="running"
    ).values_list("pk", flat=True):
        experiment_end(experiment_id=exp_id, to="aborted", actor=BENCH, reason="left running")


def summarize(results: list[RunResult], *, lease: float, reaper_period: float) -> dict[str, Any]:
    """Per mode the median and max over runs of the last fault's time, and the counts."""
    report: dict[str, Any] = {
        "experiments": results[0].experiments if results else 0,
        "confirmed_reverted": sum(min(r.confirmed, r.seen_gone) for r in results),
        "faults_injected": sum(r.injected for r in results),
    }
    for mode in MODES:
        runs = [r for r in results if r.mode == mode]
        lasts = [r.last_s for r in runs if r.last_s is not None]
        every = [t for r in runs for t in r.per_fault_s]
        report[mode] = {
            "runs": len(runs),
            "median_s": round(statistics.median(lasts), 4) if lasts else None,
            "max_s": max(lasts) if lasts else None,
            "runs_all_confirmed": len(lasts),
            "per_fault_median_s": round(statistics.median(every), 4) if every else None,
            "engage_call_median_s": round(statistics.median([r.engage_call_s for r in runs]), 4)
            if runs
            else None,
            "reverted_by": _sum_dicts([r.reverted_by for r in runs]),
            "last_fault_s_per_run": [r.last_s for r in runs],
        }
    report["live"]["target_s"] = 2.0
    report["controllers_killed"]["bound_s"] = lease + reaper_period
    return report


def _sum_dicts(dicts: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            total[k] = total.get(k, 0) + v
    return total


def experiments_left() -> int:
    """Experiments of the benchmark's teams still running (none after a clean run)."""
    return ChaosExperiment.objects.filter(
        team__slug__startswith="lever-bench-", status="running"
    ).count()
