"""Measure the web alone: its CPU per request and the create's latency over HTTP, a run per round
(bench/portal/web.py).

Needs PostgreSQL (the web's processes share the database with this command).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from bench.portal import harness, web
from kiln import benchjson


class Command(BaseCommand):
    help = "Benchmark the web's CPU per request and the create's latency over HTTP; prints JSON."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rounds", type=int, default=5)
        parser.add_argument("--clients", type=int, default=8)
        parser.add_argument("--requests", type=int, default=25, help="creates per client")
        parser.add_argument("--web-processes", type=int, default=2)
        parser.add_argument("--json", action="store_true", help="one line of JSON")

    def handle(self, *args, **opts) -> None:
        started_at = benchjson.now()
        for name in ("rounds", "clients", "requests", "web_processes"):
            if opts[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        if settings.DATABASES["default"]["ENGINE"] != "kiln.postgresql":
            raise CommandError("web_bench needs PostgreSQL (DATABASE_URL): the web runs apart")
        settings.KILN_TEAM_LIMITS = harness.TEAM_LIMITS
        engineer, approver = harness.bench_people()
        workdir = Path(tempfile.mkdtemp(prefix="web-bench-"))
        try:
            result = web.run(
                rounds=opts["rounds"],
                clients=opts["clients"],
                requests=opts["requests"],
                web_processes=opts["web_processes"],
                workdir=workdir,
                engineer=engineer,
                approver=approver,
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        out = {
            "rounds": opts["rounds"],
            "clients": opts["clients"],
            "requests_per_client": opts["requests"],
            "web_processes": opts["web_processes"],
            "request": "POST /api/v1/environments/ (staging: waits for an approver, no task)",
            **result,
        }
        out = benchjson.stamped(out, name="web_bench", date=started_at)
        self.stdout.write(json.dumps(out, indent=None if opts["json"] else 2))
