"""Field rules for an environment request, shared by the API serializer, the form and the service."""

from __future__ import annotations

import re
from typing import Any

from portal.conf import MAX_CPU, MAX_GPU, MAX_GPU_PER_CLASS, MAX_MEMORY_GIB, MAX_TTL_HOURS

DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ENV_CLASSES = ("ephemeral", "dev", "staging", "prod")
WORKLOAD_CLASSES = ("latency-sensitive", "standard", "batch")
FIELDS = (
    "team",
    "name",
    "env_class",
    "ttl_hours",
    "workload_class",
    "cpu",
    "memory_gib",
    "gpu",
    "tenant_control_plane",
    "spot_node_pool",
    "database",
    "justification",
)


def namespace_for(team: str, name: str) -> str:
    """The namespace of an environment: <team>-<name>."""
    return f"{team}-{name}"


def field_errors(data: dict[str, Any]) -> dict[str, list[str]]:
    """Semantic checks on already-typed fields; empty when the request is well-formed."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    name = data.get("name", "")
    if not DNS_LABEL_RE.match(name or "") or len(name) > 40:
        add(
            "name",
            "Use a DNS-1123 label: lower-case letters, digits and '-', at most 40 characters.",
        )
    team = data.get("team", "")
    if name and team and len(namespace_for(team, name)) > 63:
        add("name", "team and name together must fit a 63-character namespace name.")
    env_class = data.get("env_class")
    if env_class not in ENV_CLASSES:
        add("env_class", f"Choose one of {', '.join(ENV_CLASSES)}.")
    if data.get("workload_class") not in WORKLOAD_CLASSES:
        add("workload_class", f"Choose one of {', '.join(WORKLOAD_CLASSES)}.")
    ttl = data.get("ttl_hours")
    if not isinstance(ttl, int) or ttl < 1:
        add("ttl_hours", "TTL must be a whole number of hours, at least 1.")
    elif env_class in MAX_TTL_HOURS and ttl > MAX_TTL_HOURS[env_class]:
        add(
            "ttl_hours", f"TTL {ttl}h exceeds the {env_class} limit of {MAX_TTL_HOURS[env_class]}h."
        )
    for field, low, high in (
        ("cpu", 1, MAX_CPU),
        ("memory_gib", 1, MAX_MEMORY_GIB),
        ("gpu", 0, MAX_GPU),
    ):
        value = data.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            add(
                field,
                f"Must be a whole number from {low} to {high}{_class_gpus(field, env_class)}.",
            )
    if len(data.get("justification", "") or "") > 2000:
        add("justification", "At most 2000 characters.")
    return errors


def _class_gpus(field: str, env_class: Any) -> str:
    """For GPUs, the class's own lower limit beside the platform's (the policy refuses more)."""
    if field != "gpu" or env_class not in MAX_GPU_PER_CLASS:
        return ""
    return f"; a {env_class} environment may have at most {MAX_GPU_PER_CLASS[env_class]}"
