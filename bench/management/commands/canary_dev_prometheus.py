"""Development Prometheus for `make dev`: Debian's server on loopback scraping the dev traffic source.

Starts /usr/bin/prometheus (bench/canary/prometheus_server.py) on a fixed loopback port,
scraping `--target` (canary_dev_traffic's port) every `--scrape-interval` seconds, with
its storage under `--workdir` (kept between runs); registers the demo service read from
Prometheus (canary.seed.seed_prometheus_demo); prints the server's URL and keeps running
until killed, then stops the server. Development only.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from bench.canary.prometheus_server import PrometheusServer, prometheus_available
from bench.management.commands.canary_dev_traffic import DEFAULT_PORT as TRAFFIC_PORT
from canary.seed import seed_prometheus_demo
from kiln.errors import KilnError

DEFAULT_PORT = 9090


class Command(BaseCommand):
    help = (
        "Development only: run Debian's Prometheus on loopback scraping the dev traffic source, "
        "register the demo service read from it, and keep running until killed."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=DEFAULT_PORT)
        parser.add_argument("--target", default=f"127.0.0.1:{TRAFFIC_PORT}", help="host:port")
        parser.add_argument("--scrape-interval", type=float, default=5.0, help="seconds")
        parser.add_argument("--workdir", default="var/dev-prometheus", help="config and storage")
        parser.add_argument("--retention", default="2d", help="how long samples are kept")
        parser.add_argument("--native-histograms", action="store_true")
        parser.add_argument("--no-seed", action="store_true", help="register no demo service")

    def handle(self, *args, **options) -> None:
        if not 0 < options["port"] < 65536:
            raise CommandError("--port must be a TCP port")
        if not 1 <= options["scrape_interval"] <= 60:
            raise CommandError("--scrape-interval must be between 1 and 60 seconds")
        if not prometheus_available():
            raise CommandError("Debian's prometheus package is missing (make prometheus-tools)")
        workdir = Path(options["workdir"]).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        server = PrometheusServer(
            targets=[options["target"]],
            scrape_interval=options["scrape_interval"],
            native_histograms=options["native_histograms"],
            retention=options["retention"],
            workdir=workdir,
            port=options["port"],
        )
        stopping = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        try:
            try:
                server.start()
            except RuntimeError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(
                f"Prometheus {server.version()} on {server.url}, scraping {options['target']} "
                f"every {options['scrape_interval']:g} s (storage {server.storage})"
            )
            configured = (getattr(settings, "KILN_PROMETHEUS_URL", "") or "").rstrip("/")
            if configured != server.url:
                self.stderr.write(
                    f"KILN_PROMETHEUS_URL is {configured or 'unset'}: services that name no "
                    f"server read that, not {server.url}"
                )
            if not options["no_seed"]:
                self._seed()
            self.stdout.flush()  # a long-running process: say so at once, piped or not
            while not stopping.wait(1.0):
                if not server.running:
                    raise CommandError(f"prometheus exited: {server.log_tail()}")
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
            signal.signal(signal.SIGTERM, previous)  # called in-process (tests): leave it as found

    def _seed(self) -> None:
        """Register the demo service read from Prometheus; a refusal is reported, not fatal."""
        try:
            created = seed_prometheus_demo()
        except KilnError as exc:
            self.stderr.write(f"demo service not registered: {exc.message}")
            return
        for line in created:
            self.stdout.write(f"seeded {line}")
