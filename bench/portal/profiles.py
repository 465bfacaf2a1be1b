"""The provisioning benchmark's delay profiles, one after the other: each starts what it drives
(the production shape, or a worker beside the API in this process), measures its requests and
the CPU each process spent, and stops it; the last hands every bench environment to teardown."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from bench.portal import harness, report
from bench.portal.clients import BenchApi, HttpApi, InProcessApi
from kiln.identity.permissions import APPROVER, ENGINEER
from kiln.standalone import Service
from tests.support.shape import TokenIssuer


@dataclass
class Driven:
    """What one profile drives: the processes it starts, the API its clients call, and the CPU
    seconds so far of this process and each process it started."""

    running: Service
    api: BenchApi
    cpu: Callable[[], dict[str, float]]


def run(
    *, opts: dict[str, Any], engineer: Any, approver: Any, prefork: bool
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Every profile `opts` names: (figures, load averages, earlier work waited for) by profile."""
    names = ["zero", "realistic"] if opts["profile"] == "both" else [opts["profile"]]
    workdir = Path(tempfile.mkdtemp(prefix="provision-bench-"))
    issuer = TokenIssuer(workdir / "jwt", "provision-bench-1") if opts["api"] == "http" else None
    finished: list[str] = []
    results, loads, backlog = {}, {}, {}
    try:
        for profile in names:
            settings.KILN_SIM_DELAY_PROFILE = profile
            settings.KILN_SIM_DELAY_SCALE = 1.0
            driven = (
                _shape(opts, profile, workdir, issuer, engineer, approver)
                if issuer is not None
                else _in_process(opts, profile, prefork, engineer, approver)
            )
            try:  # what failed to start is stopped all the same: nothing outlives the bench
                driven.running.start()
                # Measure this run alone: no earlier bench work queued or still tearing down.
                backlog[profile] = {
                    "queued": harness.wait_for_empty_queue(timeout=180.0) if prefork else 0,
                    "tearing_down": harness.wait_for_teardown(timeout=180.0),
                    "database": harness.stand_in_for_autovacuum(),
                }
                before, cpu_before = os.getloadavg(), driven.cpu()
                observed = harness.drive(
                    api=driven.api,
                    team=harness.TEAM,
                    requests=opts["requests"],
                    warmup=opts["warmup"],
                    concurrency=opts["concurrency"],
                    closed=opts["arrival"] == "closed",
                    timeout=opts["timeout"],
                )
                finished.extend([*observed.warmed, *observed.submitted])
                results[profile] = report.profile_result(observed, requests=opts["requests"])
                results[profile]["cpu_ms_per_environment"] = report.cpu_ms_per_environment(
                    before=cpu_before, after=driven.cpu(), sent=opts["requests"] + opts["warmup"]
                )
                loads[profile] = report.load_around(before, os.getloadavg())
                if profile == names[-1]:
                    harness.hand_to_teardown(engineer=engineer, public_ids=finished)
                    if prefork:
                        harness.wait_for_empty_queue(timeout=60.0)  # leave no bench work queued
            finally:
                driven.running.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results, loads, backlog


def _shape(
    opts: dict[str, Any],
    profile: str,
    workdir: Path,
    issuer: TokenIssuer,
    engineer: Any,
    approver: Any,
) -> Driven:
    """The production shape over HTTP, the people's bearer tokens signed by the bench."""
    shape = harness.production_shape(
        profile=profile, workers=opts["workers"], workdir=workdir, issuer=issuer
    )
    api = HttpApi(
        port=shape.port,
        engineer_token=issuer.sign(engineer.username, [ENGINEER], harness.TEAM),
        approver_token=issuer.sign(approver.username, [APPROVER], harness.TEAM),
    )

    def cpu() -> dict[str, float]:
        by_process = shape.cpu_seconds()
        return {
            "bench_process": harness.process_cpu_seconds(),
            "web": by_process["web"],
            "worker_and_audit_writer": by_process["worker"] + by_process["writer"],
        }

    return Driven(Service("production shape", shape.start_all, shape.stop_all), api, cpu)


def _in_process(
    opts: dict[str, Any], profile: str, prefork: bool, engineer: Any, approver: Any
) -> Driven:
    """The API through the test client in this process, beside a prefork or threads worker."""

    def cpu() -> dict[str, float]:
        seconds = {"bench_process": harness.process_cpu_seconds()}
        if prefork:
            seconds["worker_and_audit_writer"] = harness.worker_cpu_seconds()
        return seconds

    worker = harness.bench_worker(kind=opts["worker"], workers=opts["workers"], profile=profile)
    return Driven(worker, InProcessApi(engineer=engineer, approver=approver), cpu)


__all__ = ["Driven", "run"]
