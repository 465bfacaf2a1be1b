"""The Chaos Mesh objects of the kinds in `kinds.py`, and their magnitude in words (pure: no
Django, no backend).

The targets are named pod by pod (`selector.pods`): Chaos Mesh then injects into exactly
those pods and no others, so the blast radius Kiln counted is the one applied. The object's
`spec.duration` is the hard maximum, never more than the kind's own.
"""

from __future__ import annotations

from typing import Any

from canary.chaos.kinds import CHAOS_MESH_API, KINDS


def _fault_spec(fault: str, params: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The kind-specific part of the Chaos Mesh spec."""
    if fault == "network-delay":
        delay = {"latency": f"{params['latency_ms']}ms"}
        if params.get("jitter_ms"):
            delay["jitter"] = f"{params['jitter_ms']}ms"
        return {"action": "delay", "direction": "to", "delay": delay}
    if fault == "network-loss":
        return {
            "action": "loss",
            "direction": "to",
            "loss": {"loss": f"{params['loss_percent']:g}"},
        }
    if fault == "network-partition":
        return {
            "action": "partition",
            "direction": params.get("direction", "both"),
            "target": {
                "mode": "all",
                # The other side is always in the experiment's namespace (kind_errors).
                "selector": {
                    "namespaces": [namespace],
                    "labelSelectors": dict(params["target_selector"]),
                },
            },
        }
    if fault == "cpu-stress":
        return {
            "stressors": {
                "cpu": {
                    "workers": int(params["cpu_workers"]),
                    "load": int(params.get("cpu_load", 100)),
                }
            }
        }
    if fault == "memory-stress":
        return {
            "stressors": {
                "memory": {
                    "workers": int(params.get("memory_workers", 1)),
                    "size": f"{int(params['memory_mb'])}MB",
                }
            }
        }
    if fault == "dns-error":
        return {"action": "error", "patterns": list(params["dns_patterns"])}
    if fault == "clock-skew":
        return {
            "timeOffset": f"{int(params['time_offset_seconds'])}s",
            "clockIds": ["CLOCK_REALTIME"],
        }
    raise ValueError(f"{fault} is not a Chaos Mesh kind of this module")


def chaos_object(
    *,
    fault: str,
    name: str,
    namespace: str,
    labels: dict[str, str],
    params: dict[str, Any],
    pods: list[str],
    max_duration_seconds: int,
) -> dict[str, Any]:
    """The Chaos Mesh object injecting `fault` into exactly `pods`, ending by itself after the hard maximum."""
    kind = KINDS[fault]
    if not pods:
        raise ValueError("a Chaos Mesh fault names at least one pod")
    duration = min(int(max_duration_seconds), kind.max_duration_seconds)
    return {
        "apiVersion": CHAOS_MESH_API,
        "kind": kind.object_kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "mode": "all",
            "selector": {"pods": {namespace: sorted(pods)}},
            "duration": f"{duration}s",
            **_fault_spec(fault, params, namespace),
        },
    }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def describe(fault: str, params: dict[str, Any]) -> str:
    """A Chaos Mesh fault's magnitude in words, for pages ("" for the other faults)."""
    if fault not in KINDS or not params:
        return ""
    if fault == "network-delay":
        jitter = f" (± {params['jitter_ms']} ms)" if params.get("jitter_ms") else ""
        return f"{params['latency_ms']} ms added to every packet sent{jitter}"
    if fault == "network-loss":
        return f"{params['loss_percent']:g}% of packets sent dropped"
    if fault == "network-partition":
        labels = ",".join(f"{k}={v}" for k, v in sorted(params["target_selector"].items()))
        return f"cut off from {labels} ({params.get('direction', 'both')})"
    if fault == "cpu-stress":
        workers = params["cpu_workers"]
        return f"{_count(workers, 'CPU worker')} at {params.get('cpu_load', 100)}% load"
    if fault == "memory-stress":
        workers = params.get("memory_workers", 1)
        each = " each" if workers != 1 else ""
        return f"{_count(workers, 'worker')} holding {params['memory_mb']} MB{each}"
    if fault == "dns-error":
        return f"lookups of {', '.join(params['dns_patterns'])} fail"
    offset = int(params["time_offset_seconds"])
    return f"clock {'ahead' if offset > 0 else 'behind'} by {abs(offset)} s"
