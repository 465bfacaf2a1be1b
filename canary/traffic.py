"""Istio traffic shifting: a rollout's step schedule, its VirtualService and DestinationRule (pure).

The DestinationRule names two subsets by the pods' `version` label; the
VirtualService splits the service's host between them by weight, exported to its
own namespace only (`exportTo: ["."]`). Services apply
them through the delivery backend (`kiln.cluster.backends.get_backend().apply`); the
simulated cluster routes simulated traffic by the weights it stores.
"""

from __future__ import annotations

from typing import Any

ISTIO_API = "networking.istio.io/v1"
BASELINE_SUBSET = "baseline"
CANARY_SUBSET = "canary"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kiln", "kiln.dev/component": "canary"}
# Every VirtualService Kiln writes applies to its own namespace only ("." in Istio's exportTo).
EXPORT_TO = (".",)
# The route intent (canary.models.RolloutRoute) a rollout's VirtualService was written for.
ANNOTATION_INTENT = "kiln.dev/route-intent"


def destination_rule(
    *, name: str, namespace: str, host: str, baseline_version: str, canary_version: str
) -> dict[str, Any]:
    """DestinationRule with a subset per version, selected by the pods' `version` label."""
    return {
        "apiVersion": ISTIO_API,
        "kind": "DestinationRule",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {
            "host": host,
            "subsets": [
                {"name": BASELINE_SUBSET, "labels": {"version": baseline_version}},
                {"name": CANARY_SUBSET, "labels": {"version": canary_version}},
            ],
        },
    }


def virtual_service(
    *,
    name: str,
    namespace: str,
    host: str,
    canary_weight: int,
    rollout_id: str = "",
    intent: int | None = None,
) -> dict[str, Any]:
    """VirtualService sending `canary_weight` percent of the host's traffic to the canary subset.

    `intent` names the route intent it is written for (a later one is never replaced by it).
    """
    if not 0 <= canary_weight <= 100:
        raise ValueError("canary_weight must be a percentage")
    annotations = {"kiln.dev/rollout": rollout_id} if rollout_id else {}
    if intent is not None:
        annotations[ANNOTATION_INTENT] = str(intent)
    return {
        "apiVersion": ISTIO_API,
        "kind": "VirtualService",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
            "annotations": annotations,
        },
        "spec": {
            "hosts": [host],
            # Visible to its own namespace's proxies only: a team's routing never reaches others.
            "exportTo": list(EXPORT_TO),
            "http": [
                {
                    "name": "canary-split",
                    "route": [
                        {
                            "destination": {"host": host, "subset": BASELINE_SUBSET},
                            "weight": 100 - canary_weight,
                        },
                        {
                            "destination": {"host": host, "subset": CANARY_SUBSET},
                            "weight": canary_weight,
                        },
                    ],
                }
            ],
        },
    }


def weight_at(steps: tuple[tuple[int, int], ...], tick: int) -> int:
    """Canary traffic percent at a 0-based tick of a step schedule ((weight, ticks), ...).

    Past the last step the schedule holds its last weight.
    """
    for weight, ticks in steps:
        if tick < ticks:
            return weight
        tick -= ticks
    return steps[-1][0]


def canary_weight_of(virtual_service_obj: dict[str, Any] | None) -> int:
    """The canary subset's weight in a (live) VirtualService; 0 when absent."""
    if not virtual_service_obj:
        return 0
    for route in (virtual_service_obj.get("spec") or {}).get("http") or []:
        for dest in route.get("route") or []:
            if (dest.get("destination") or {}).get("subset") == CANARY_SUBSET:
                return int(dest.get("weight") or 0)
    return 0
