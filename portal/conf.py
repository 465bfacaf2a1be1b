"""The portal's settings with their defaults, read in one place (docs/configuration.md lists them)."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings

from portal.compose import DatastorePool, parse_datastore_pools
from portal.disruption import ClassLifecycle


def _get(name: str, default):
    return getattr(settings, name, default)


def policy_dir() -> Path:
    """Directory holding request/ and manifests/ policy sets."""
    return Path(_get("KILN_POLICY_DIR", Path(settings.BASE_DIR) / "deploy" / "policies"))


def policy_timeout() -> float:
    """Seconds a policy set may take before it denies."""
    return float(_get("KILN_POLICY_TIMEOUT_SECONDS", 2.0))


def team_limits() -> dict[str, int]:
    """Per-team caps over live environments: cpu, memoryGi, gpu, environments."""
    raw = _get("KILN_TEAM_LIMITS", "cpu=128,memoryGi=512,gpu=8,environments=20")
    limits = {"cpu": 128, "memoryGi": 512, "gpu": 8, "environments": 20}
    for part in str(raw).split(","):
        if "=" in part:
            key, value = part.split("=", 1)
            limits[key.strip()] = int(value)
    return limits


def datastore_pools() -> list[DatastorePool]:
    """Kamaji datastore pools as name:label:cap entries; raises DatastorePoolSpecInvalid, naming
    the entry, when the setting does not parse."""
    raw = _get(
        "KILN_DATASTORE_POOLS",
        "etcd-a1:zone-a:30,etcd-a2:zone-a:30,etcd-b1:zone-b:30,etcd-c1:zone-c:30",
    )
    return parse_datastore_pools(raw)


def tenant_audit_sink() -> str:
    """Base URL tenant API servers post their audit EventLists to (the environment id is appended)."""
    return str(
        _get("KILN_TENANT_AUDIT_SINK", "") or "https://kiln.kiln-system.svc/hooks/tenant-audit"
    )


def provision_timeout() -> float:
    """Seconds from provisioning start until a not-ready environment is FAILED."""
    return float(_get("KILN_PROVISION_TIMEOUT_SECONDS", 900))


def poll_seconds() -> float:
    """Seconds between readiness checks while provisioning or tearing down."""
    return float(_get("KILN_PROVISION_POLL_SECONDS", 0.5))


def teardown_deadline() -> float:
    """Seconds teardown waits for finalizers and the audit chain before QUARANTINE."""
    return float(_get("KILN_TEARDOWN_DEADLINE_SECONDS", 300))


def tenant_audit_ack_timeout() -> float:
    """Seconds teardown waits for the tenant API server's last audit batch before it goes on."""
    return float(_get("KILN_TENANT_AUDIT_ACK_SECONDS", 30))


def quarantine_owner() -> str:
    """Username who owns quarantined environments (empty: the requester)."""
    return str(_get("KILN_QUARANTINE_OWNER", "") or "")


def gitops_repo() -> str:
    """Git repository the gitops backend commits to (a path or URL)."""
    return str(_get("KILN_GITOPS_REPO", "") or (Path(settings.VAR_DIR) / "gitops.git"))


def gitops_branch() -> str:
    """Branch the gitops backend commits to."""
    return str(_get("KILN_GITOPS_BRANCH", "main") or "main")


def auto_approve_classes() -> tuple[str, ...]:
    """Environment classes approved automatically when every policy allows."""
    return ("ephemeral", "dev")


# The longest TTL each class may have (the request policy ttl-per-class says the same).
MAX_TTL_HOURS = {"ephemeral": 72, "dev": 336, "staging": 720, "prod": 8760}
# The most GPUs each class may ask for (the request policy gpu-limits says the same).
MAX_GPU_PER_CLASS = {"ephemeral": 1, "dev": 2, "staging": 4, "prod": 8}
# Classes that may have a spot node pool (the request policy spot-classes says the same).
SPOT_CLASSES = ("ephemeral", "dev")
MAX_CPU = 256
MAX_MEMORY_GIB = 2048
MAX_GPU = 16


def kubeconfig_server() -> str:
    """The cluster API URL people reach, written into downloaded kubeconfigs."""
    return str(
        _get("KILN_KUBECONFIG_SERVER", "")
        or _get("KILN_KUBE_API_URL", "")
        or "https://kubernetes.kiln.local:6443"
    )


HOUR = 3600.0
# Per class: FAILED grace before automatic teardown, the longest deferral past expiry and its step,
# the warning ahead of expiry, idleness (None: prod is never proposed for early teardown), and
# sleeping: inactivity before it sleeps (None: never for inactivity), and whether it may sleep.
LIFECYCLE_DEFAULTS: dict[str, dict[str, float | bool | None]] = {
    "ephemeral": {"failed_grace": 0.25 * HOUR, "max_deferral": 1 * HOUR, "deferral_step": 300,
                  "warn_before": 1 * HOUR, "idle_after": 12 * HOUR, "idle_grace": 2 * HOUR,
                  "sleep_after": 1 * HOUR, "may_sleep": True},
    "dev": {"failed_grace": 1 * HOUR, "max_deferral": 4 * HOUR, "deferral_step": 600,
            "warn_before": 4 * HOUR, "idle_after": 48 * HOUR, "idle_grace": 24 * HOUR,
            "sleep_after": 2 * HOUR, "may_sleep": True},
    "staging": {"failed_grace": 4 * HOUR, "max_deferral": 24 * HOUR, "deferral_step": 900,
                "warn_before": 24 * HOUR, "idle_after": 7 * 24 * HOUR, "idle_grace": 48 * HOUR,
                "sleep_after": 8 * HOUR, "may_sleep": True},
    "prod": {"failed_grace": 24 * HOUR, "max_deferral": 72 * HOUR, "deferral_step": 1800,
             "warn_before": 72 * HOUR, "idle_after": None, "idle_grace": 72 * HOUR,
             "sleep_after": None, "may_sleep": False},
}  # fmt: skip


def class_lifecycle(env_class: str) -> ClassLifecycle:
    """The class's lifecycle timings: the defaults, overridden per class by KILN_LIFECYCLE_CLASSES
    (a dict such as {"dev": {"max_deferral": 7200}}, seconds)."""
    raw = _get("KILN_LIFECYCLE_CLASSES", {}) or {}
    overrides = (json.loads(raw) if isinstance(raw, str) else raw).get(env_class, {})
    unknown = set(overrides) - set(LIFECYCLE_DEFAULTS[env_class])
    if unknown:
        raise ValueError(
            f"KILN_LIFECYCLE_CLASSES: unknown fields {sorted(unknown)} for {env_class}"
        )
    return ClassLifecycle(**{**LIFECYCLE_DEFAULTS[env_class], **overrides})


def terminate_check_url() -> str:
    """Template of a workload's terminate-check URL ({service}, {namespace}, {port}, {path})."""
    return str(
        _get("KILN_TERMINATE_CHECK_URL", "")
        or "http://{service}.{namespace}.svc.cluster.local:{port}{path}"
    )


def http_timeout() -> float:
    """Seconds a terminate check or a team webhook may take to answer."""
    return float(_get("KILN_LIFECYCLE_HTTP_TIMEOUT_SECONDS", 2.0))


def webhook_allow_private() -> bool:
    """Whether a team webhook may be on a loopback or private address (kiln/outbound.py)."""
    return bool(_get("KILN_WEBHOOK_ALLOW_PRIVATE", True))


def currency() -> str:
    """The platform's one currency (ISO 4217): prices, estimates and budgets are in it."""
    return str(_get("KILN_CURRENCY", "USD")).upper()


def budget_idle_seconds() -> float:
    """At the budget, environments with no activity for this long are put to sleep first."""
    return float(_get("KILN_BUDGET_IDLE_SECONDS", 3600.0))


def wake_timeout() -> float:
    """Seconds from a wake's request until an environment not serving again is FAILED."""
    return float(_get("KILN_WAKE_TIMEOUT_SECONDS", 600))
