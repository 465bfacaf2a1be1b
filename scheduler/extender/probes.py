"""The extender process's readiness and its serving certificate's expiry, for its metrics server.

The extender is ready (`/readyz` on KILN_METRICS_PORT, 9104 in deploy/) once its inventory is
loaded and its kernels compiled: before that, kube-scheduler's calls would wait on both.
`kiln_scheduler_extender_certificate_expiry_timestamp_seconds` is the notAfter of the certificate
it loaded at start (absent when it serves plain HTTP), so an alert fires before kube-scheduler's
mTLS calls start failing; `kiln_scheduler_extender_inventory_nodes` is the nodes it loaded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography import x509
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


def certificate_not_after(path: str) -> float:
    """The notAfter of the first PEM certificate in `path`, in Unix seconds."""
    cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    return cert.not_valid_after_utc.timestamp()


class ExtenderState(Collector):
    """What the extender loaded at start: its inventory's size and its certificate's notAfter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.nodes: int | None = None
        self.not_after: float | None = None

    def inventory_loaded(self, nodes: int) -> None:
        """Record that the inventory (`nodes` nodes) is loaded and the kernels are warm."""
        with self._lock:
            self.nodes = nodes

    def inventory_check(self) -> dict[str, Any]:
        """Readiness: the inventory is loaded."""
        with self._lock:
            nodes = self.nodes
        if nodes is None:
            return {"ok": False, "reason": "inventory not loaded yet"}
        return {"ok": True, "nodes": nodes}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The inventory's size once loaded, the certificate's notAfter when serving TLS."""
        with self._lock:
            nodes, not_after = self.nodes, self.not_after
        if nodes is not None:
            family = GaugeMetricFamily(
                "kiln_scheduler_extender_inventory_nodes", "Nodes in the inventory loaded at start"
            )
            family.add_metric([], float(nodes))
            yield family
        if not_after is not None:
            family = GaugeMetricFamily(
                "kiln_scheduler_extender_certificate_expiry_timestamp_seconds",
                "notAfter of the extender's serving certificate (Unix seconds)",
            )
            family.add_metric([], not_after)
            yield family

    def describe(self) -> list:
        """Nothing: registering must not collect."""
        return []
