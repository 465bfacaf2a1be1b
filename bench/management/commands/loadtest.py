"""`manage.py loadtest [--fault KIND]`: the production shape under the locust mix over HTTP,
with one fault, reconciled afterwards; prints JSON (docs/operations.md, docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from bench.loadtest import faults
from bench.loadtest.run import Plan, run
from kiln import benchjson


def _think(text: str) -> tuple[float, float]:
    """`MIN:MAX` or one number (both ends), in seconds."""
    try:
        low, _, high = text.partition(":")
        pair = (float(low), float(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected seconds as MIN:MAX or one number"
        ) from None
    if not (0 <= pair[0] <= pair[1] and math.isfinite(pair[1])):
        raise argparse.ArgumentTypeError(f"{text!r}: expected 0 <= MIN <= MAX")
    return pair


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected at least 1")
    return value


class Command(BaseCommand):
    help = "Drive the production shape with the load mix (one fault at most) and reconcile."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=8130, help="web; the extender is port+1")
        parser.add_argument("--engineers", type=int, default=20)
        parser.add_argument("--environments", type=int, default=5, help="per engineer")
        parser.add_argument("--dashboards", type=int, default=2)
        parser.add_argument("--max-seconds", type=float, default=300.0)
        parser.add_argument("--fault", choices=faults.KINDS, default="none")
        parser.add_argument("--fault-at", type=float, default=10.0)
        parser.add_argument("--node-list-size", type=int, default=600)
        parser.add_argument(
            "--worker-concurrency",
            type=_positive,
            default=Plan.worker_concurrency,
            help=f"the Celery worker's processes (default {Plan.worker_concurrency}, as make dev)",
        )
        parser.add_argument(
            "--web-processes",
            type=_positive,
            default=Plan.web_processes,
            help=f"uvicorn's worker processes (default {Plan.web_processes}, as make dev)",
        )
        parser.add_argument(
            "--think",
            type=_think,
            default=Plan.think,
            metavar="MIN:MAX",
            help="seconds an engineer thinks before each next step, uniform between MIN and MAX "
            f"(default {Plan.think[0]:g}:{Plan.think[1]:g}, a person reading the answer); 0 for "
            "the stress mix, every engineer as fast as the answers come",
        )
        parser.add_argument("--workdir", default="", help="logs and keys (default: a temp dir)")
        parser.add_argument(
            "--own-servers",
            action="store_true",
            help="run against a throwaway Redis and PostgreSQL on port+2 and port+3 "
            "(always so for the redis and postgres faults)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON only")

    def handle(self, *args, **opts) -> None:
        # SIGTERM unwinds like Ctrl-C, so the processes and servers of the run are stopped.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        started_at = benchjson.now()
        own = opts["own_servers"] or opts["fault"] in ("redis", "postgres")
        if own and "KILN_LOAD_REDIS_PORT" not in os.environ:
            self._with_own_servers(opts)
            return
        workdir = Path(opts["workdir"] or tempfile.mkdtemp(prefix="kiln-load-"))
        plan = Plan(
            port=opts["port"],
            engineers=opts["engineers"],
            environments=opts["environments"],
            dashboards=opts["dashboards"],
            max_seconds=opts["max_seconds"],
            fault=opts["fault"],
            fault_at=opts["fault_at"],
            node_list_size=opts["node_list_size"],
            worker_concurrency=opts["worker_concurrency"],
            think=opts["think"],
            web_processes=opts["web_processes"],
        )
        load_before = os.getloadavg()
        result = run(plan, workdir=workdir)
        out = {
            "command": "python manage.py loadtest " + " ".join(sys.argv[2:]),
            "machine": benchjson.machine(),
            "date": started_at,
            "load_average": {
                "before": [round(x, 2) for x in load_before],
                "after": [round(x, 2) for x in os.getloadavg()],
            },  # fmt: skip
            "database": settings.DATABASES["default"]["NAME"],
            **result,
        }
        self.stdout.write(json.dumps(out, indent=None if opts["json"] else 2))

    def _with_own_servers(self, opts) -> None:
        """Start a throwaway Redis (and PostgreSQL) on ports after the web's and rerun this
        command against them, so the restart fault never touches the machine's shared servers."""
        directory = Path(tempfile.mkdtemp(prefix="kiln-load-servers-"))
        servers = faults.OwnServers(
            redis_port=opts["port"] + 2,
            directory=directory,
            postgres_port=opts["port"] + 3
            if opts["own_servers"] or opts["fault"] == "postgres"
            else 0,
        )
        servers.start()
        try:
            environment = {**os.environ, **servers.environment()}
            if servers.postgres_port:
                for step in (["migrate", "--noinput", "-v", "0"], ["audit_setup_roles"]):
                    subprocess.run(
                        [sys.executable, "manage.py", *step], cwd=settings.BASE_DIR,
                        env=environment, check=True, stdout=subprocess.DEVNULL,
                    )  # fmt: skip
            subprocess.run(
                [sys.executable, "manage.py", *sys.argv[1:]], cwd=settings.BASE_DIR,
                env=environment, check=True,
            )  # fmt: skip
        finally:
            servers.stop()
