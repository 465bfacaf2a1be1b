"""Measure request-to-READY through the API, policy gate, approval, Celery and the simulated cluster.

By default when the broker is shared (Redis) the bench runs the production
shape, as `make dev` does: the web as uvicorn processes (one per core) called
over HTTP with bearer tokens (`--api http`), a separate `celery -A kiln worker
--pool prefork` process pool and the audit writer; the bench waits until its
queue is empty before measuring and stops them after each profile. On the
memory transport (standalone) the worker is an in-process thread pool
(`--worker threads`) and the API is called through Django's test client in this
process (`--api client`, which also runs beside a prefork worker: then every
client thread runs Django in this one process, sharing its interpreter lock).

`--requests` environments go through the API from `--concurrency` clients. By default (`--arrival closed`) each
client carries one request to READY before it sends the next, so exactly
`--concurrency` requests are in flight, as a load generator's concurrency
means; `--arrival burst` has the clients send every POST as fast as they can
without waiting, which measures the queue a burst of 100 builds as well. The
first `--warmup` requests (default: one per client) go through the same path
but are left out of the figures, so that they describe the steady state and not
every process's first request and the simultaneous start of all clients. Every
fifth request is staging and is approved over the API by a second person; one
in ten is retried with the same Idempotency-Key. It prints p50/p95
request-to-READY for the zero-delay profile (Kiln's own overhead) and the
realistic delay profile, plus how many environments were lost or duplicated,
with the load average around each profile. Once measured, the bench's
environments are handed to teardown over the API (DELETE).
"""

from __future__ import annotations

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from bench.portal import harness, profiles, report
from kiln import benchjson, heap
from kiln.celery import app


class Command(BaseCommand):
    help = "Benchmark request-to-READY (zero-delay and realistic profiles); prints JSON."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--requests", type=int, default=100)
        parser.add_argument("--concurrency", type=int, default=20)
        parser.add_argument(
            "--worker",
            choices=["threads", "prefork"],
            default=None,
            help="prefork (default on a shared broker): a separate `celery worker` process pool "
            "on the configured broker, as `make dev` runs it; threads (default on the memory "
            "transport): an in-process thread pool",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=None,
            help="worker concurrency: processes (default 2) or threads (default 4)",
        )
        parser.add_argument(
            "--warmup",
            type=int,
            default=None,
            help="requests sent first and left out of the figures, so they describe the steady "
            "state rather than every process's first request (default: --concurrency)",
        )
        parser.add_argument(
            "--arrival",
            choices=["closed", "burst"],
            default="closed",
            help="closed: each client waits for READY before its next request (--concurrency "
            "in flight); burst: clients send every request without waiting",
        )
        parser.add_argument(
            "--api",
            choices=["http", "client"],
            default=None,
            help="http (default with a prefork worker): the web of the production shape over "
            "HTTP; client: Django's test client in this process (the only one with --worker "
            "threads)",
        )
        parser.add_argument("--profile", choices=["zero", "realistic", "both"], default="both")
        parser.add_argument(
            "--timeout", type=float, default=180.0, help="seconds to wait for READY"
        )
        parser.add_argument("--json", action="store_true", help="print JSON only")

    def handle(self, *args, **opts) -> None:
        started_at = benchjson.now()
        app.conf.task_always_eager = False
        shared = str(app.conf.broker_url or "").startswith(("redis://", "rediss://", "amqp://"))
        opts["worker"] = opts["worker"] or ("prefork" if shared else "threads")
        opts["workers"] = opts["workers"] or (2 if opts["worker"] == "prefork" else 4)
        opts["api"] = opts["api"] or ("http" if opts["worker"] == "prefork" else "client")
        if opts["api"] == "http" and opts["worker"] != "prefork":
            raise CommandError("--api http runs the production shape: it needs --worker prefork")
        # With --api client every client thread keeps a connection of this process, as a server's
        # request threads do (the test client never hands it back), beside the watcher's and
        # this thread's: a smaller pool leaves clients waiting for a connection no one returns.
        pool, needed = getattr(settings, "KILN_DB_POOL_MAX", 0), opts["concurrency"] + 2
        if opts["api"] == "client" and 0 < pool < needed:
            raise CommandError(
                f"--concurrency {opts['concurrency']} needs KILN_DB_POOL_MAX >= {needed} (it is "
                f"{pool}): each client thread holds a database connection of this process"
            )
        if opts["warmup"] is None:
            opts["warmup"] = opts["concurrency"]
        prefork = opts["worker"] == "prefork"
        if not prefork:
            # The bench's own in-process worker and broker: nothing leaves this process.
            app.conf.broker_url = "memory://localhost/"
            app.conf.result_backend = "cache+memory://"
        elif not shared:
            raise CommandError("--worker prefork needs a broker other processes see (REDIS_URL)")
        settings.KILN_TEAM_LIMITS = harness.TEAM_LIMITS
        engineer, approver = harness.bench_people()
        if opts["api"] == "client":  # the API runs here: set up as a web process is (kiln/asgi.py)
            heap.freeze_after(heap.import_views)
        results, loads, backlog = profiles.run(
            opts=opts, engineer=engineer, approver=approver, prefork=prefork
        )
        out = report.bench_report(
            opts=opts,
            broker=str(app.conf.broker_url),
            loads=loads,
            backlog=backlog,
            results=results,
        )
        out = benchjson.stamped(out, name="provision_bench", date=started_at)
        self.stdout.write(json.dumps(out, indent=None if opts["json"] else 2))
