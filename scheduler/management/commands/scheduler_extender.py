"""Serve the kube-scheduler extender (POST /scheduler/filter, /scheduler/prioritize) as its own process."""

from __future__ import annotations

import ssl

from django.core.management.base import BaseCommand, CommandError

from kiln import health, metrics_server, observability
from scheduler import selectors
from scheduler.extender.probes import ExtenderState, certificate_not_after
from scheduler.extender.server import extender_serve


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
        snapshot = selectors.node_snapshot()  # fail fast if the database is unreachable
        tls = {}
        if opts["tls_cert"]:
            tls = {"ssl_certfile": opts["tls_cert"], "ssl_keyfile": opts["tls_key"]}
            if opts["client_ca"]:
                tls.update(ssl_ca_certs=opts["client_ca"], ssl_cert_reqs=ssl.CERT_REQUIRED)
        self.stderr.write(f"scheduler extender on {opts['host']}:{opts['port']}")
        extender_serve(
            None,
            host=opts["host"],
            port=opts["port"],
            log_level=opts["log_level"],
            tls=tls,
            when_warm=lambda: state.inventory_loaded(len(snapshot.names)),
        )
