"""What an app that injects faults adds to rollouts: how a VirtualService is written, what traffic suffers.

The chaos app (`canary/chaos/`) puts faults into the VirtualServices rollouts write. It
stands on canary (services, namespace ownership, the Istio manifests), so canary cannot
import it back without closing a circle; instead chaos installs two hooks here when
Django starts (`ChaosConfig.ready`), and canary calls them:

- `write_virtual_services(backend, manifests)`: apply a rollout's manifests. Without
  chaos, `backend.apply`; with it, injected faults are carried across the re-apply.
- `traffic_faults(virtual_services, host)`: what faults in these VirtualServices do to
  the host's traffic (the simulated cluster's metrics suffer them). Without chaos, none.

No Django here: the hooks take and return plain data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class FaultEffect(Protocol):
    """What faults do to one host's traffic: the extra failed share, mean added latency, delayed share."""

    error_rate: float
    added_latency_ms: float
    delayed_share: float


@dataclass(frozen=True)
class NoFault:
    """The effect of no fault at all."""

    error_rate: float = 0.0
    added_latency_ms: float = 0.0
    delayed_share: float = 0.0


VirtualServiceWriter = Callable[[Any, list[dict[str, Any]]], Any]
FaultReader = Callable[[list[dict[str, Any]], str], FaultEffect]


def _apply(backend: Any, manifests: list[dict[str, Any]]) -> Any:
    return backend.apply(manifests)


def _no_faults(virtual_services: list[dict[str, Any]], host: str) -> FaultEffect:
    return NoFault()


_writer: VirtualServiceWriter = _apply
_reader: FaultReader = _no_faults


def install(*, writer: VirtualServiceWriter, faults: FaultReader) -> None:
    """Route rollouts' VirtualService writes through `writer` and read traffic faults with `faults`."""
    global _writer, _reader
    _writer, _reader = writer, faults


def write_virtual_services(backend: Any, manifests: list[dict[str, Any]]) -> Any:
    """Apply a rollout's manifests through the installed writer (default: `backend.apply`)."""
    return _writer(backend, manifests)


def traffic_faults(virtual_services: list[dict[str, Any]], host: str) -> FaultEffect:
    """What the faults in `virtual_services` do to `host`'s traffic (default: nothing)."""
    return _reader(virtual_services, host)
