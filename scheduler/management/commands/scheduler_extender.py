"""Serve the kube-scheduler extender (POST /scheduler/filter, /scheduler/prioritize) as its own process."""

from __future__ import annotations

import ssl

import uvicorn
from django.core.management.base import BaseCommand, CommandError

from kiln import health, metrics_server, observability
from scheduler import scoring_kernel, selectors
from scheduler.bench import synthetic_snapshot
from scheduler.extender import lookup
from scheduler.extender.handler import ExtenderASGI
from scheduler.extender.probes import ExtenderState, certificate_not_after
from scheduler.extender.server import ExtenderHttpProtocol


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # measuring/serving commands need no URL checks
    help = "Run the scheduler extender: a small uvicorn server answering kube-scheduler's calls."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 - kube-scheduler calls in over the network
        parser.add_argument("--port", type=int, default=8888)
        parser.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
        parser.add_argument("--tls-key", help="private key of --tls-cert (PEM)")
        parser.add_argument(
            "--client-ca",
            help="require client certificates signed by this CA (mTLS with kube-scheduler)",
        )
        parser.add_argument("--log-level", default="warning")
        parser.add_argument(
            "--bench-nodes",
            type=int,
            default=0,
            help="benchmarks only: serve N synthetic nodes instead of the inventory",
        )

    def handle(self, *args, **opts):
        if bool(opts["tls_cert"]) != bool(opts["tls_key"]):
            raise CommandError("--tls-cert and --tls-key go together")
        if opts["client_ca"] and not opts["tls_cert"]:
            raise CommandError("--client-ca needs --tls-cert and --tls-key")
        # /metrics and probes on KILN_METRICS_PORT (9104 in deploy/), not ready until the
        # inventory is loaded and the kernels are warm.
        state = ExtenderState()
        if opts["tls_cert"]:
            state.not_after = certificate_not_after(opts["tls_cert"])
        observability.add_scrape_collector(state, kind="scheduler-extender")
        metrics_server.start_from_env(
            "scheduler-extender",
            ready={"inventory": state.inventory_check, "database": health.database},
        )
        source = None
        if opts["bench_nodes"] > 0:
            snapshot = synthetic_snapshot(opts["bench_nodes"])
            source = lambda: snapshot  # noqa: E731
        else:
            snapshot = selectors.node_snapshot()  # fail fast if the database is unreachable
        tls = {}
        if opts["tls_cert"]:
            tls = {"ssl_certfile": opts["tls_cert"], "ssl_keyfile": opts["tls_key"]}
            if opts["client_ca"]:
                tls.update(ssl_ca_certs=opts["client_ca"], ssl_cert_reqs=ssl.CERT_REQUIRED)
        # Compile or load the kernels before the first call waits on them.
        scoring_kernel.warm_up()
        lookup.warm_up()
        state.inventory_loaded(len(snapshot.names))
        self.stderr.write(f"scheduler extender on {opts['host']}:{opts['port']}")
        uvicorn.run(
            ExtenderASGI(source),
            host=opts["host"],
            port=opts["port"],
            log_level=opts["log_level"],
            access_log=False,
            lifespan="on",
            http=ExtenderHttpProtocol,  # httptools, one socket write per response
            ws="none",
            **tls,
        )
