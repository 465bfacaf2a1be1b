"""The faults Kiln injects through Chaos Mesh, as data (pure: no Django, no backend).

Each kind names its Chaos Mesh object, the magnitude fields it takes with their bounds,
its blast-radius rule (the most of the selected pods it may touch, as a percentage that
caps whatever `max_pods`/`max_percent` ask) and its hard maximum duration, which is
also written as the object's own `spec.duration`, so Chaos Mesh ends the fault even if
Kiln is gone. `kind_errors` checks a definition against them (one message per field,
naming the rule), `kind_params` keeps the magnitude an experiment stores, and
`pods_within` counts the pods a term may touch; `chaos_mesh.py` builds the objects.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

CHAOS_MESH_API = "chaos-mesh.org/v1alpha1"
DIRECTIONS = ("to", "from", "both")
DNS_PATTERN_RE = re.compile(
    r"^(\*\.)?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\*?$"
)
MAX_DNS_PATTERNS = 10
LABEL_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


@dataclass(frozen=True)
class Param:
    """One magnitude field: its type (`int`, `float`, `choice`, `selector`, `patterns`, `namespace`) and bounds."""

    name: str
    label: str
    type: str
    minimum: float | None = None
    maximum: float | None = None
    required: bool = True
    default: Any = None
    choices: tuple[str, ...] = ()
    unit: str = ""
    help: str = ""


@dataclass(frozen=True)
class ChaosMeshKind:
    """A fault kind carried by one Chaos Mesh object, with its bounds as data."""

    fault: str
    object_kind: str
    params: tuple[Param, ...]
    max_duration_seconds: int  # the hard maximum, also the object's spec.duration
    magnitude_rule: str
    max_percent: float = 50.0  # blast radius: the most of the selected pods, whatever else is asked
    blast_limits: str = ""  # what the blast radius is held to besides the percentage

    @property
    def plural(self) -> str:
        """The object kind's resource name in the API path."""
        return self.object_kind.lower()

    @property
    def blast_rule(self) -> str:
        """The blast-radius rule in words, as the percentage cap says it."""
        return f"at most {self.max_percent:g}% of the selected pods{self.blast_limits}"

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


KINDS: dict[str, ChaosMeshKind] = {
    k.fault: k
    for k in (
        ChaosMeshKind(
            fault="network-delay",
            object_kind="NetworkChaos",
            params=(
                Param(
                    "latency_ms",
                    "Latency (ms)",
                    "int",
                    1,
                    5_000,
                    unit="ms",
                    help="added to every packet the selected pods send",
                ),
                Param(
                    "jitter_ms",
                    "Jitter (ms)",
                    "int",
                    0,
                    5_000,
                    required=False,
                    default=0,
                    unit="ms",
                    help="at most the latency",
                ),
            ),
            max_duration_seconds=3_600,
            magnitude_rule="latency 1-5000 ms, jitter at most the latency",
        ),
        ChaosMeshKind(
            fault="network-loss",
            object_kind="NetworkChaos",
            params=(
                Param(
                    "loss_percent",
                    "Packet loss (%)",
                    "float",
                    1,
                    100,
                    unit="%",
                    help="share of the packets the selected pods send that are dropped",
                ),
            ),
            max_duration_seconds=1_800,
            blast_limits=" (never a whole service)",
            magnitude_rule="loss 1-100% of packets",
        ),
        ChaosMeshKind(
            fault="network-partition",
            object_kind="NetworkChaos",
            params=(
                Param(
                    "target_selector",
                    "Partitioned from (labels)",
                    "selector",
                    help="matchLabels of the pods on the other side, in the same namespace",
                ),
                Param(
                    "target_namespace",
                    "Other side's namespace",
                    "namespace",
                    required=False,
                    help="only the experiment's own namespace",
                ),
                Param(
                    "direction",
                    "Direction",
                    "choice",
                    required=False,
                    default="both",
                    choices=DIRECTIONS,
                ),
            ),
            max_duration_seconds=900,
            blast_limits="; the other side only in the experiment's namespace",
            magnitude_rule="to, from or both directions",
        ),
        ChaosMeshKind(
            fault="cpu-stress",
            object_kind="StressChaos",
            params=(
                Param("cpu_workers", "CPU workers", "int", 1, 8, help="stress-ng CPU workers"),
                Param(
                    "cpu_load",
                    "CPU load (%)",
                    "int",
                    1,
                    100,
                    required=False,
                    default=100,
                    unit="%",
                    help="load each worker puts on its CPU",
                ),
            ),
            max_duration_seconds=1_800,
            magnitude_rule="1-8 workers, load 1-100%",
        ),
        ChaosMeshKind(
            fault="memory-stress",
            object_kind="StressChaos",
            params=(
                Param(
                    "memory_mb",
                    "Memory (MB)",
                    "int",
                    1,
                    4_096,
                    unit="MB",
                    help="memory each worker holds",
                ),
                Param("memory_workers", "Memory workers", "int", 1, 4, required=False, default=1),
            ),
            max_duration_seconds=1_800,
            magnitude_rule="1-4 workers of 1-4096 MB",
        ),
        ChaosMeshKind(
            fault="dns-error",
            object_kind="DNSChaos",
            params=(
                Param(
                    "dns_patterns",
                    "Domains (patterns)",
                    "patterns",
                    help="names whose lookups fail, e.g. payments.example.com, *.internal; "
                    "never every name",
                ),
            ),
            max_duration_seconds=1_800,
            blast_limits="; named domains only",
            magnitude_rule=f"1-{MAX_DNS_PATTERNS} domain patterns",
        ),
        ChaosMeshKind(
            fault="clock-skew",
            object_kind="TimeChaos",
            params=(
                Param(
                    "time_offset_seconds",
                    "Clock offset (s)",
                    "int",
                    -600,
                    600,
                    unit="s",
                    help="negative for a clock behind; at most 10 minutes either way",
                ),
            ),
            max_percent=25.0,
            max_duration_seconds=600,
            magnitude_rule="offset at most 10 minutes either way, never 0",
        ),
    )
}

# Every field any kind takes: a field of another kind is refused, not silently dropped.
PARAM_FIELDS: tuple[str, ...] = tuple(
    dict.fromkeys(p.name for k in KINDS.values() for p in k.params)
)
OBJECT_KINDS: tuple[str, ...] = tuple(dict.fromkeys(k.object_kind for k in KINDS.values()))


def is_chaos_mesh(fault: str) -> bool:
    """True for the kinds of this module (not pod kill, which predates them, nor HTTP faults)."""
    return fault in KINDS


def _number(value: Any, param: Param) -> str | None:
    """The problem with a number field, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"a number from {_fmt(param.minimum)} to {_fmt(param.maximum)}{param.unit}"
    if param.type == "int" and not float(value).is_integer():
        return "a whole number"
    if not math.isfinite(value) or not (param.minimum <= value <= param.maximum):
        return f"{_fmt(param.minimum)} to {_fmt(param.maximum)}{param.unit}"
    return None


def _fmt(value: float | None) -> str:
    return f"{value:g}" if value is not None else ""


def _param_error(param: Param, value: Any, data: dict[str, Any]) -> str | None:
    if param.type in ("int", "float"):
        return _number(value, param)
    if param.type == "choice":
        return None if value in param.choices else f"one of {', '.join(param.choices)}"
    if param.type == "namespace":
        if value != data.get("namespace"):
            return "a partition stays within the experiment's own namespace"
        return None
    if param.type == "selector":
        if (
            not isinstance(value, dict)
            or not value
            or not all(
                isinstance(k, str) and LABEL_RE.match(k) and isinstance(v, str) and v
                for k, v in value.items()
            )
        ):
            return "non-empty matchLabels (string keys and values)"
        return None
    if param.type == "patterns":
        if not isinstance(value, list) or not (1 <= len(value) <= MAX_DNS_PATTERNS):
            return f"1 to {MAX_DNS_PATTERNS} domain patterns: never every name"
        for pattern in value:
            if not isinstance(pattern, str) or pattern.strip("*.") == "":
                return "a bare * would fail every lookup: name the domains"
            if not DNS_PATTERN_RE.match(pattern):
                return f"{pattern!r} is not a domain pattern (a name, *.suffix or prefix*)"
        return None
    raise ValueError(f"unknown parameter type {param.type}")


def kind_errors(data: dict[str, Any]) -> dict[str, str]:
    """Every rule a Chaos Mesh kind's definition breaks, by field; empty when it may run.

    The kind's magnitude bounds, its blast-radius cap on `max_percent`, its hard maximum on
    `max_duration_seconds`, and no field of another kind. Nothing for the other faults beyond
    refusing these kinds' fields.
    """
    fault = data.get("fault")
    kind = KINDS.get(fault) if isinstance(fault, str) else None
    errors: dict[str, str] = {}
    own = {p.name for p in kind.params} if kind else set()
    for name in PARAM_FIELDS:
        if name not in own and data.get(name) not in (None, "", [], {}):
            errors[name] = f"not a field of {fault}"
    if kind is None:
        return errors
    for param in kind.params:
        value = data.get(param.name)
        if value in (None, "", [], {}):
            if param.required:
                errors[param.name] = f"required for {fault}"
            continue
        problem = _param_error(param, value, data)
        if problem:
            errors[param.name] = f"{problem} for {fault}"
    if fault == "network-delay" and "latency_ms" not in errors and "jitter_ms" not in errors:
        if (data.get("jitter_ms") or 0) > data["latency_ms"]:
            errors["jitter_ms"] = "at most the latency"
    if fault == "clock-skew" and data.get("time_offset_seconds") == 0:
        errors["time_offset_seconds"] = "a clock offset of 0 is no fault"
    max_percent = data.get("max_percent")
    if isinstance(max_percent, int | float) and max_percent > kind.max_percent:
        errors["max_percent"] = (
            f"{fault} touches {kind.blast_rule} (max_percent ≤ {kind.max_percent:g})"
        )
    hard = data.get("max_duration_seconds")
    if isinstance(hard, int) and hard > kind.max_duration_seconds:
        errors["max_duration_seconds"] = (
            f"{fault} runs at most {kind.max_duration_seconds} seconds (its hard maximum)"
        )
    return errors


def kind_params(data: dict[str, Any]) -> dict[str, Any]:
    """The magnitude an experiment of a Chaos Mesh kind stores: its own fields, defaults filled."""
    kind = KINDS.get(data.get("fault") or "")
    if kind is None:
        return {}
    params: dict[str, Any] = {}
    for param in kind.params:
        value = data.get(param.name)
        if value in (None, "", [], {}):
            value = data.get("namespace") if param.type == "namespace" else param.default
        if value is None:
            continue
        if param.type == "int":
            value = int(value)
        elif param.type == "float":
            value = float(value)
        params[param.name] = value
    return params


def pods_within(total: int, max_pods: int | None, max_percent: float | None, fault: str) -> int:
    """Pods a term may touch: the blast radius asked, capped by the kind's own percentage."""
    cap = KINDS[fault].max_percent
    limit = total if max_pods is None else min(total, max_pods)
    percent = cap if max_percent is None else min(max_percent, cap)
    # floor, so rounding never touches more than the percentage allows (1e-9: 50% of 4 is 2).
    return max(0, min(limit, math.floor(total * percent / 100.0 + 1e-9)))
