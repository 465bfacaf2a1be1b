"""The one interface to a cluster: GitOps, Kubernetes and the simulated cluster behind one protocol.

This package holds the protocol (`kiln.cluster.protocol`) and its types (`AppliedRef`,
`Health`, `DeliveryError`, ...). It imports no model, because Django imports it while it loads the apps (it
is the `cluster` app, owner of the simulated cluster's tables); the backends and
`get_backend` live in `kiln.cluster.backends`. See docs/cluster.md.
"""

from kiln.cluster.base import (
    AppliedRef,
    Conflict,
    DeliveryError,
    Health,
    HealthStatus,
    InvalidManifest,
    LeaseConflict,
    health_of,
    match_labels,
    parse_label_selector,
    ref_of,
)
from kiln.cluster.protocol import DeliveryBackend, LeaseMirror

__all__ = [
    "AppliedRef",
    "Conflict",
    "DeliveryBackend",
    "DeliveryError",
    "Health",
    "HealthStatus",
    "InvalidManifest",
    "LeaseConflict",
    "LeaseMirror",
    "health_of",
    "match_labels",
    "parse_label_selector",
    "ref_of",
]
