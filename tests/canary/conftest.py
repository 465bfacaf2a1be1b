"""Canary fixtures: a real Prometheus server on loopback scraping an Istio traffic source.

Debian's `prometheus` package is required (make prometheus-tools): without it these
fixtures fail, they never skip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench.canary.istio_source import IstioSource
from bench.canary.prometheus_server import PrometheusServer

# Tests scrape at a realistic interval; the exact-window tests backfill history instead of waiting.
SCRAPE_SECONDS = 5.0


@pytest.fixture
def istio_source() -> Iterator[IstioSource]:
    """An Istio metrics target (classic histograms) serving on a free loopback port."""
    source = IstioSource().start()
    yield source
    source.stop()


@pytest.fixture
def prometheus_factory() -> Iterator[Callable[..., PrometheusServer]]:
    """prometheus_factory(targets=[...], scrape_interval=5, native_histograms=False, start=True)."""
    servers: list[PrometheusServer] = []

    def make(*, start: bool = True, **options: Any) -> PrometheusServer:
        options.setdefault("scrape_interval", SCRAPE_SECONDS)
        server = PrometheusServer(**options)
        servers.append(server)
        return server.start() if start else server

    yield make
    for server in servers:
        server.close()


@pytest.fixture
def prometheus(istio_source, prometheus_factory) -> PrometheusServer:
    """A running Prometheus scraping `istio_source` every SCRAPE_SECONDS seconds."""
    return prometheus_factory(targets=[istio_source.address])
