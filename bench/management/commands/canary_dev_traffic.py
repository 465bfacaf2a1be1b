"""Development traffic for `make dev`: Istio metrics of every Prometheus-read service, split by its rollout.

Serves /metrics on a loopback port (the target canary_dev_prometheus scrapes). Each
second it reads the services whose metrics source is Prometheus and each one's latest
rollout, and serves that second's requests of the service's traffic class: the canary
version gets the rollout's current weight (Rollout.weight: the step, 100 once promoted,
0 once rolled back or aborted), the baseline the rest; a service with no rollout serves
v1 alone. Runs until killed. Development only.
"""

from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections

from bench.canary.dev_traffic import DevTraffic, Route
from bench.canary.istio_source import IstioSource
from canary import selectors
from canary.models import MetricsSource
from kiln.identity.permissions import system_actor

DEFAULT_PORT = 9471
STABLE_VERSION = "v1"  # what a service with no rollout yet serves


def dev_routes() -> list[Route]:
    """One route per service read from Prometheus: its latest rollout's versions and canary weight."""
    viewer = system_actor("canary-bench")
    routes = []
    for service in selectors.service_list(viewer=viewer).filter(
        metrics_source=MetricsSource.PROMETHEUS
    ):
        rollout = selectors.rollout_list(viewer=viewer).filter(service=service).first()
        if rollout is None:
            baseline = canary = STABLE_VERSION
            weight, seed, started = 0, 0, service.created_at.timestamp()
        else:
            baseline, canary = rollout.baseline_version, rollout.canary_version
            weight, seed, started = rollout.weight, rollout.seed, rollout.created_at.timestamp()
        routes.append(
            Route(
                service=service.name,
                namespace=service.namespace,
                traffic_class=service.sim_traffic_class,
                baseline=baseline,
                canary=canary,
                weight=int(weight),
                regression=(service.sim_regressions or {}).get(canary) if rollout else None,
                seed=int(seed),
                started=started,
            )
        )
    return sorted(routes, key=lambda r: r.key)


class Command(BaseCommand):
    help = (
        "Development only: serve Istio metrics for every service read from Prometheus, each "
        "version's share following its rollout's canary weight, until killed."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="loopback port")
        parser.add_argument("--seconds", type=int, default=0, help="stop after N (0: never)")
        parser.add_argument(
            "--native-schema",
            type=int,
            default=None,
            help="also serve native histograms of this schema (-4..8) for a server that reads them",
        )

    def handle(self, *args, **options) -> None:
        if not 0 < options["port"] < 65536:
            raise CommandError("--port must be a TCP port")
        schema = options["native_schema"]
        if schema is not None and not -4 <= schema <= 8:
            raise CommandError("--native-schema must be between -4 and 8")
        try:
            source = IstioSource(native_schema=schema).start(port=options["port"])
        except OSError as exc:
            raise CommandError(f"cannot listen on 127.0.0.1:{options['port']}: {exc}") from None
        self.stdout.write(f"Istio traffic source on http://{source.address}/metrics")
        self.stdout.flush()
        stopping = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        limit = options["seconds"]
        reads = 0
        last: list[Route] = []

        def read() -> list[Route]:
            nonlocal last, reads
            reads += 1
            close_old_connections()
            try:
                last = dev_routes()
            except DatabaseError as exc:  # the database is restarting: keep the last split
                self.stderr.write(f"routes unchanged, database unavailable: {exc}")
            return last

        def stop() -> bool:
            return stopping.is_set() or bool(limit and reads >= limit)

        try:
            DevTraffic(source).run(read, stop=stop, on_routes=self._show)
        except KeyboardInterrupt:
            pass
        finally:
            source.stop()
            signal.signal(signal.SIGTERM, previous)  # called in-process (tests): leave it as found

    def _show(self, routes: list[Route]) -> None:
        """Say how each service's traffic is split now."""
        for r in routes:
            split = (
                f"{r.baseline} {100 - r.weight}% / {r.canary} {r.weight}%"
                if r.canary != r.baseline
                else f"{r.baseline} 100%"
            )
            self.stdout.write(f"{r.namespace}/{r.service}: {split} ({r.traffic_class})")
        self.stdout.flush()  # a long-running process: each change shows at once, piped or not
