"""Celery, and each subsystem's own settings: the audit chain, cluster delivery, environments
(portal), the scheduler, chaos and canary rollouts, with the beat schedule they add to."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from kiln.settings import environ
from kiln.settings.environ import REDIS_URL, STANDALONE, VAR_DIR, env, env_bool, env_float, env_int

# --- celery ----------------------------------------------------------------

CELERY_BROKER_URL = env("CELERY_BROKER_URL", REDIS_URL or "memory://localhost/")
CELERY_RESULT_BACKEND = env("CELERY_RESULT_BACKEND", REDIS_URL or "cache+memory://")
if CELERY_BROKER_URL.startswith("redis://"):
    # kombu's Redis transport, repaired so that a worker survives a Redis restart (kiln/broker.py).
    CELERY_BROKER_TRANSPORT = "kiln.broker:Transport"
CELERY_TASK_ACKS_LATE = True  # a killed worker's task is redelivered, not lost
CELERY_TASK_REJECT_ON_WORKER_LOST = True  # a killed pool process's task too
# On Redis an unacknowledged message comes back by itself only after the visibility timeout
# (kombu's hour, kept: shorter would redeliver long countdowns and long tasks while their worker
# lives). A worker killed whole is caught sooner: each worker keeps a heartbeat (time to live
# KILN_CELERY_HOLDER_TTL seconds) and records the messages it holds; a sweep every
# KILN_CELERY_RECOVERY_SECONDS puts back those of a worker gone a whole TTL (kiln/task_recovery.py).
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
# Celery settings (the worker reads them from its configuration; kiln/task_recovery.py imports
# no Django, as kiln.celery must not).
CELERY_KILN_HOLDER_TTL = env_float("KILN_CELERY_HOLDER_TTL", 10.0)
CELERY_KILN_RECOVERY_SECONDS = env_float("KILN_CELERY_RECOVERY_SECONDS", 2.0)
if CELERY_KILN_HOLDER_TTL <= 0 or CELERY_KILN_RECOVERY_SECONDS <= 0:
    raise ImproperlyConfigured(
        "KILN_CELERY_HOLDER_TTL and KILN_CELERY_RECOVERY_SECONDS must be positive seconds"
    )
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Without it Celery closes the database connection after every task (a new connection per
# task); with it a worker keeps its connection and CONN_MAX_AGE still recycles it.
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 1000)
CELERY_BEAT_SCHEDULE: dict[str, dict] = {}


def _beat(name: str, task: str, seconds: float) -> None:
    """Have beat send `task` every `seconds`, under the entry `name`."""
    CELERY_BEAT_SCHEDULE[name] = {"task": task, "schedule": seconds}


# --- audit chain (docs/audit.md) -------------------------------------------------

KILN_AUDIT_STREAM = env("KILN_AUDIT_STREAM", "kiln:audit")
KILN_AUDIT_GROUP = env("KILN_AUDIT_GROUP", "kiln-audit-writer")
KILN_AUDIT_CONSUMER = env("KILN_AUDIT_CONSUMER", "writer-1")
KILN_AUDIT_BATCH_SIZE = env_int("KILN_AUDIT_BATCH_SIZE", 1000)
KILN_AUDIT_CHECKPOINT_EVERY = env_int("KILN_AUDIT_CHECKPOINT_EVERY", 10000)
KILN_AUDIT_CHECKPOINT_SECONDS = env_float("KILN_AUDIT_CHECKPOINT_SECONDS", 60.0)
KILN_AUDIT_SWEEP_SECONDS = env_float("KILN_AUDIT_SWEEP_SECONDS", 5.0)
KILN_AUDIT_REPUBLISH_SECONDS = env_float("KILN_AUDIT_REPUBLISH_SECONDS", 300.0)
KILN_AUDIT_MAX_LAG_SECONDS = env_float("KILN_AUDIT_MAX_LAG_SECONDS", 120.0)
# The writer's liveness: past this lag, a lag that grew since the last probe restarts the writer.
KILN_AUDIT_WRITER_LIVE_LAG_SECONDS = env_float("KILN_AUDIT_WRITER_LIVE_LAG_SECONDS", 600.0)
KILN_AUDIT_RELAY_ON_COMMIT = env_bool("KILN_AUDIT_RELAY_ON_COMMIT", True)
KILN_AUDIT_ORIGIN = env("KILN_AUDIT_ORIGIN", "kiln.local/audit")
KILN_AUDIT_TLOG_PUBLIC = env_bool("KILN_AUDIT_TLOG_PUBLIC", False)
# Witnesses whose cosignatures Kiln accepts: their verifier keys (<name>+<hash>+<key>), comma-separated.
KILN_AUDIT_WITNESSES = env("KILN_AUDIT_WITNESSES", "")
# Ed25519 PEM private key signing checkpoints; unset: a dev key generated under var/audit/.
KILN_AUDIT_SIGNING_KEY = env(
    "KILN_AUDIT_SIGNING_KEY", str(VAR_DIR / "audit" / "checkpoint-key.pem")
)
KILN_AUDIT_SIGNING_KEY_IS_DEV = env("KILN_AUDIT_SIGNING_KEY") is None or STANDALONE
# Anchors, comma-separated: dir:/path and/or git:/path/to/repo. Unset: a directory under var/audit/.
KILN_AUDIT_ANCHORS = env("KILN_AUDIT_ANCHORS", f"dir:{VAR_DIR / 'audit' / 'anchor'}")
KILN_AUDIT_WRITER_ROLE = env("KILN_AUDIT_WRITER_ROLE", "kiln_audit_writer")
KILN_AUDIT_APP_ROLE = env("KILN_AUDIT_APP_ROLE", "kiln_app")
_beat("audit-relay-sweep", "audit.tasks.relay_outbox", KILN_AUDIT_SWEEP_SECONDS)

# --- delivery ------------------------------------------------------------------

# simulated | kubernetes | gitops. Standalone defaults to the simulated cluster.
KILN_DELIVERY_BACKEND = env("KILN_DELIVERY_BACKEND", "simulated")
# Simulated cluster: per-kind readiness delays (zero | fast | realistic) times a scale.
KILN_SIM_DELAY_PROFILE = env("KILN_SIM_DELAY_PROFILE", "fast")
KILN_SIM_DELAY_SCALE = env_float("KILN_SIM_DELAY_SCALE", 1.0)
KILN_SIM_FINALIZER_SECONDS = env_float("KILN_SIM_FINALIZER_SECONDS", 1.0)
# gitops backend: the repository (path or URL; default a bare repository under var/) and branch.
KILN_GITOPS_REPO = env("KILN_GITOPS_REPO", str(VAR_DIR / "gitops.git"))
KILN_GITOPS_BRANCH = env("KILN_GITOPS_BRANCH", "main")
# Where gitops reads health back: simulated (stands in for Argo CD) or kubernetes.
KILN_GITOPS_OBSERVER = env("KILN_GITOPS_OBSERVER", "simulated")
# Argo CD's API, asked to refresh after each gitops commit (unset: its poll alone syncs).
KILN_ARGOCD_URL = env("KILN_ARGOCD_URL", "")
KILN_ARGOCD_TOKEN_FILE = env("KILN_ARGOCD_TOKEN_FILE", "")
KILN_ARGOCD_APPLICATION = env("KILN_ARGOCD_APPLICATION", "kiln-environments")
KILN_ARGOCD_APP_NAMESPACE = env("KILN_ARGOCD_APP_NAMESPACE", "argocd")
# kubernetes backend: API server URL and bearer token file (unset: kubeconfig / in-cluster).
KILN_KUBE_API_URL = env("KILN_KUBE_API_URL")
KILN_KUBE_TOKEN_FILE = env("KILN_KUBE_TOKEN_FILE")
KILN_KUBE_CA_FILE = env("KILN_KUBE_CA_FILE")
# The kubernetes client's limits, explicit (client-go's token bucket: QPS on average, bursts of
# BURST; QPS 0 is no limit) and its HTTP connection pool per process.
KILN_KUBE_QPS = env_float("KILN_KUBE_QPS", 50.0)
KILN_KUBE_BURST = env_int("KILN_KUBE_BURST", 100)
KILN_KUBE_POOL_SIZE = env_int("KILN_KUBE_POOL_SIZE", 16)
# The API server URL people reach, written into the portal's kubeconfig downloads.
KILN_KUBECONFIG_SERVER = env("KILN_KUBECONFIG_SERVER")

# --- environments (portal) ------------------------------------------------------
KILN_POLICY_DIR = env("KILN_POLICY_DIR", str(environ.BASE_DIR / "deploy" / "policies"))
KILN_POLICY_TIMEOUT_SECONDS = env_float("KILN_POLICY_TIMEOUT_SECONDS", 2.0)
KILN_TEAM_LIMITS = env("KILN_TEAM_LIMITS", "cpu=128,memoryGi=512,gpu=8,environments=20")
KILN_DATASTORE_POOLS = env(
    "KILN_DATASTORE_POOLS",
    "etcd-a1:zone-a:30,etcd-a2:zone-a:30,etcd-b1:zone-b:30,etcd-c1:zone-c:30",
)
# Base URL tenant API servers post their audit EventLists to (the environment id is appended).
KILN_TENANT_AUDIT_SINK = env(
    "KILN_TENANT_AUDIT_SINK", "https://kiln.kiln-system.svc/hooks/tenant-audit"
)
KILN_PROVISION_TIMEOUT_SECONDS = env_float("KILN_PROVISION_TIMEOUT_SECONDS", 900)
KILN_PROVISION_POLL_SECONDS = env_float("KILN_PROVISION_POLL_SECONDS", 0.5)
KILN_TEARDOWN_DEADLINE_SECONDS = env_float("KILN_TEARDOWN_DEADLINE_SECONDS", 300)
KILN_QUARANTINE_OWNER = env("KILN_QUARANTINE_OWNER", "")
# Per-class lifecycle timings over portal/conf.py's defaults, JSON: {"dev": {"max_deferral": 7200}}.
KILN_LIFECYCLE_CLASSES = env("KILN_LIFECYCLE_CLASSES", "")
KILN_TERMINATE_CHECK_URL = env("KILN_TERMINATE_CHECK_URL", "")
KILN_LIFECYCLE_HTTP_TIMEOUT_SECONDS = env_float("KILN_LIFECYCLE_HTTP_TIMEOUT_SECONDS", 2.0)
# Team webhooks on loopback or private addresses (link-local ones are never called: kiln/outbound.py).
KILN_WEBHOOK_ALLOW_PRIVATE = env_bool("KILN_WEBHOOK_ALLOW_PRIVATE", True)
KILN_REAP_INTERVAL_SECONDS = env_float("KILN_REAP_INTERVAL_SECONDS", 60)
_beat("portal-reap-expired", "portal.reap_expired", KILN_REAP_INTERVAL_SECONDS)
# Budgets: the one currency prices and budgets are in; how often teams' budgets are checked
# (thresholds told, idle environments put to sleep at the budget) and what counts as idle then.
KILN_CURRENCY = env("KILN_CURRENCY", "USD")
KILN_BUDGET_CHECK_SECONDS = env_float("KILN_BUDGET_CHECK_SECONDS", 300)
KILN_BUDGET_IDLE_SECONDS = env_float("KILN_BUDGET_IDLE_SECONDS", 3600)
_beat("portal-budgets-enforce", "portal.budgets_enforce", KILN_BUDGET_CHECK_SECONDS)

# --- scheduler ---------------------------------------------------------------
# Score weights (each in [0, 1], summing to 1; checked when the app loads).
KILN_SCHEDULER_WEIGHT_COST = env_float("KILN_SCHEDULER_WEIGHT_COST", 0.5)
KILN_SCHEDULER_WEIGHT_PACKING = env_float("KILN_SCHEDULER_WEIGHT_PACKING", 0.3)
KILN_SCHEDULER_WEIGHT_RISK = env_float("KILN_SCHEDULER_WEIGHT_RISK", 0.2)
# Optional shared secret kube-scheduler sends as `Authorization: Bearer <token>` to the extender.
KILN_SCHEDULER_EXTENDER_TOKEN = env("KILN_SCHEDULER_EXTENDER_TOKEN")
KILN_SCHEDULER_MAX_BODY_BYTES = env_int("KILN_SCHEDULER_MAX_BODY_BYTES", 32 * 1024 * 1024)
KILN_SCHEDULER_SNAPSHOT_TTL_SECONDS = env_float("KILN_SCHEDULER_SNAPSHOT_TTL_SECONDS", 2.0)
# k of the capacity-pool spread filter per workload class ("standard=2,batch=2"; each >= 1,
# checked when the app loads): at most ceil(replicas / k) spot replicas in one capacity pool.
KILN_SCHEDULER_SPREAD_K = env("KILN_SCHEDULER_SPREAD_K", "standard=2,batch=2")
# Nodes sync from the configured cluster (KILN_DELIVERY_BACKEND) every this many seconds.
KILN_SCHEDULER_SYNC_SECONDS = env_float("KILN_SCHEDULER_SYNC_SECONDS", 15.0)
_beat("scheduler-nodes-resync", "scheduler.tasks.nodes_resync", KILN_SCHEDULER_SYNC_SECONDS)
# The simulated cluster's Karpenter, kube-scheduler and spot reclaims (docs/scheduler.md): they
# act only where the delivery backend simulates scheduling (the simulated cluster).
KILN_SIM_CLUSTER_TICK_SECONDS = env_float("KILN_SIM_CLUSTER_TICK_SECONDS", 5.0)
# Spot interruption rates times this (1 = the price book's real monthly rates).
KILN_SIM_SPOT_RECLAIM_SCALE = env_float(
    "KILN_SIM_SPOT_RECLAIM_SCALE", 20000.0 if STANDALONE else 1.0
)
KILN_SIM_SPOT_NOTICE_SECONDS = env_float("KILN_SIM_SPOT_NOTICE_SECONDS", 120.0)
KILN_SIM_DEMO_WORKLOAD = env_bool("KILN_SIM_DEMO_WORKLOAD", STANDALONE)
KILN_SIM_NODE_CACHE_CAPABLE = env_bool("KILN_SIM_NODE_CACHE_CAPABLE", True)
_beat("scheduler-cluster-tick", "scheduler.tasks.cluster_tick", KILN_SIM_CLUSTER_TICK_SECONDS)
# Disruption freezes (docs/scheduler.md): no node stays out of Karpenter's voluntary disruption
# for Kiln's sake longer than this; the beat releases freezes whose holder is gone this often.
KILN_DISRUPTION_FREEZE_MAX_SECONDS = env_float("KILN_DISRUPTION_FREEZE_MAX_SECONDS", 21600.0)
KILN_DISRUPTION_FREEZE_REAP_SECONDS = env_float("KILN_DISRUPTION_FREEZE_REAP_SECONDS", 15.0)
_beat(
    "scheduler-disruption-freezes-reap",
    "scheduler.tasks.disruption_freezes_reap",
    KILN_DISRUPTION_FREEZE_REAP_SECONDS,
)

# --- chaos (docs/chaos.md): leader-election timings of fault leases, in seconds --------------

KILN_CHAOS_LEASE_DURATION = env_float("KILN_CHAOS_LEASE_DURATION", 15.0)
KILN_CHAOS_RENEW_DEADLINE = env_float("KILN_CHAOS_RENEW_DEADLINE", 10.0)
KILN_CHAOS_RETRY_PERIOD = env_float("KILN_CHAOS_RETRY_PERIOD", 2.0)
KILN_CHAOS_MAX_CLOCK_SKEW = env_float("KILN_CHAOS_MAX_CLOCK_SKEW", 1.0)
KILN_CHAOS_REVERT_BUDGET = env_float("KILN_CHAOS_REVERT_BUDGET", 2.0)
KILN_CHAOS_REAPER_PERIOD = env_float("KILN_CHAOS_REAPER_PERIOD", 5.0)
# How much recent traffic of the target a stop condition judges at every renewal.
KILN_CHAOS_STOP_WINDOW_SECONDS = env_float("KILN_CHAOS_STOP_WINDOW_SECONDS", 60.0)
# A revert is read back until the fault is seen gone: this many attempts, the pause between
# them doubling from KILN_CHAOS_REVERT_RETRY_SECONDS; then it is marked for a person.
KILN_CHAOS_REVERT_ATTEMPTS = env_int("KILN_CHAOS_REVERT_ATTEMPTS", 3)
KILN_CHAOS_REVERT_RETRY_SECONDS = env_float("KILN_CHAOS_REVERT_RETRY_SECONDS", 0.5)
KILN_CHAOS_LEASE_NAMESPACE = env("KILN_CHAOS_LEASE_NAMESPACE", "kiln")
# Start a controller task when an experiment starts (off for the crash benchmark, which runs its own).
KILN_CHAOS_AUTORUN = env_bool("KILN_CHAOS_AUTORUN", True)
CELERY_IMPORTS = ("canary.chaos.tasks",)
_beat("chaos-reaper", "chaos.tasks.chaos_reap", KILN_CHAOS_REAPER_PERIOD)

# --- canary rollouts (docs/canary.md) -------------------------------------------------------
# Each rollout re-enqueues its next tick; this beat sweep enqueues any tick that is due, so a
# killed worker (or a lost countdown task) delays a rollout by at most one sweep.
KILN_CANARY_SWEEP_SECONDS = env_float("KILN_CANARY_SWEEP_SECONDS", 2.0)
# The Prometheus HTTP API the analyser queries (base URL), and the other base URLs a service
# may name (comma-separated). Metrics servers come from here, never from what a client sends.
KILN_PROMETHEUS_URL = env("KILN_PROMETHEUS_URL", "")
KILN_PROMETHEUS_URL_ALLOWLIST = [
    u.strip() for u in (env("KILN_PROMETHEUS_URL_ALLOWLIST", "") or "").split(",") if u.strip()
]
# Prometheus windows (canary/prometheus.py): a tick's window closes this long before the tick is
# due, so the last scrape in it is stored when it is read; reads time out after the next; the
# scrape interval (0: read from the server's /api/v1/targets) sets the shortest tick allowed.
KILN_PROMETHEUS_SETTLE_SECONDS = env_float("KILN_PROMETHEUS_SETTLE_SECONDS", 15.0)
KILN_PROMETHEUS_TIMEOUT_SECONDS = env_float("KILN_PROMETHEUS_TIMEOUT_SECONDS", 5.0)
KILN_PROMETHEUS_SCRAPE_SECONDS = env_float("KILN_PROMETHEUS_SCRAPE_SECONDS", 0.0)
_beat("canary-rollouts-tick-due", "canary.tasks.rollouts_tick_due", KILN_CANARY_SWEEP_SECONDS)
# Running rollouts renew the disruption freeze of their canary's nodes this often (docs/scheduler.md).
KILN_CANARY_FREEZE_SYNC_SECONDS = env_float("KILN_CANARY_FREEZE_SYNC_SECONDS", 10.0)
_beat(
    "canary-rollouts-freeze-sync",
    "canary.tasks.rollouts_freeze_sync",
    KILN_CANARY_FREEZE_SYNC_SECONDS,
)
