"""Kiln settings, read from the environment (docs/configuration.md lists every variable).

Standalone mode (the default when neither DATABASE_URL nor REDIS_URL is set, or
when KILN_STANDALONE=1) swaps only transports: SQLite under var/, the in-memory
channel layer and Celery's memory transport. Every other variable still
overrides standalone's defaults.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured


def env(name: str, default: str | None = None) -> str | None:
    """Return an environment variable, treating an empty value as unset."""
    value = os.environ.get(name, "")
    return value if value != "" else default


def env_bool(name: str, default: bool) -> bool:
    value = env(name)
    if value is None:
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {value!r}")


def env_int(name: str, default: int) -> int:
    value = env(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}") from exc


def env_float(name: str, default: float) -> float:
    value = env(name)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, not {value!r}") from exc


BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env("KILN_VAR_DIR", str(BASE_DIR / "var")))

DATABASE_URL = env("DATABASE_URL")
REDIS_URL = env("REDIS_URL")
STANDALONE = env_bool("KILN_STANDALONE", DATABASE_URL is None and REDIS_URL is None)
# Outside standalone the web, worker, relay and audit writer are separate processes that must
# share one audit topic (a Redis stream). Without Redis each would get its own in-process
# topic and a separate audit writer would never see an event, so refuse to start at all.
if not STANDALONE and REDIS_URL is None:
    raise ImproperlyConfigured(
        "REDIS_URL is required outside standalone mode: the audit topic (a Redis stream) must "
        "be shared by every process. Set REDIS_URL, or run standalone (KILN_STANDALONE=1, or "
        "neither DATABASE_URL nor REDIS_URL set)."
    )

# --- core ------------------------------------------------------------------

# Off everywhere by default (standalone too: same pages and error responses as production).
DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env("SECRET_KEY")
if SECRET_KEY is None:
    if not STANDALONE:
        raise ImproperlyConfigured("SECRET_KEY is required outside standalone mode")
    SECRET_KEY = "standalone-insecure-key-only-for-127.0.0.1"  # noqa: S105 - standalone only

ALLOWED_HOSTS = [
    h.strip()
    for h in env("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")
    if h.strip()
]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in env("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "kiln.apps.KilnAdminConfig",  # django.contrib.admin, its site asking kiln.identity.permissions
    "django.contrib.auth",
    "axes",  # login throttling (below, "identity")
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "kiln",
    "kiln.cluster",  # the cluster interface; owns the simulated cluster's tables
    # Kiln's apps, each after the ones it stands on: kiln.seed runs their demo seeds in this
    # order (scheduler's prices before portal's cost estimates).
    "audit",
    "scheduler",
    "portal",
    "canary",
    "canary.chaos.apps.ChaosConfig",  # label "chaos"
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "kiln.middleware.ContentSecurityPolicyMiddleware",
    "kiln.request_guard.RequestGuardMiddleware",  # NUL/over-long path or query values: a 400
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "kiln.identity.pages.RoleRequiredPagesMiddleware",  # no Kiln role: only the home page
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "kiln.middleware.RequestMetricsMiddleware",
    "axes.middleware.AxesMiddleware",  # a locked-out sign-in gets the explained login page
]

ROOT_URLCONF = "kiln.urls"
ASGI_APPLICATION = "kiln.asgi.application"
# The apps' URL modules kiln/urls.py mounts (pages at /, APIs under /api/v1/), and the modules
# whose websocket_urlpatterns kiln/asgi.py routes: named, never imported by the project package.
KILN_APP_URLCONFS = (
    "portal.urls",
    "scheduler.urls",
    "canary.urls",
    "canary.chaos.urls",
    "audit.urls",
)
KILN_WEBSOCKET_ROUTES = ("canary.routing",)

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "kiln.context_processors.navigation",
            ],
        },
    },
]

# --- data ------------------------------------------------------------------

if DATABASE_URL:
    DATABASES = {
        "default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
    }
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "kiln.sqlite3",
            "OPTIONS": {
                # One process, several threads (web, worker, beat, audit writer):
                # WAL lets readers run beside the writer, IMMEDIATE avoids upgrade deadlocks.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if REDIS_URL:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- celery ----------------------------------------------------------------

CELERY_BROKER_URL = env("CELERY_BROKER_URL", REDIS_URL or "memory://localhost/")
CELERY_RESULT_BACKEND = env("CELERY_RESULT_BACKEND", REDIS_URL or "cache+memory://")
CELERY_TASK_ACKS_LATE = True  # a killed worker's task is redelivered, not lost
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Without it Celery closes the database connection after every task (a new connection per
# task); with it a worker keeps its connection and CONN_MAX_AGE still recycles it.
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 1000)
CELERY_BEAT_SCHEDULE: dict[str, dict] = {}

# --- identity ----------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
CSRF_FAILURE_VIEW = "kiln.views.csrf_failure"

JWT_KEY_DIR = VAR_DIR / "jwt"
# A file path or an http(s) URL of a JWKS. Unset: the dev key pair under var/jwt/.
KILN_JWT_JWKS = env("KILN_JWT_JWKS", str(JWT_KEY_DIR / "jwks.json"))
KILN_JWT_JWKS_IS_DEV = env("KILN_JWT_JWKS") is None
KILN_JWT_PRIVATE_KEY = env("KILN_JWT_PRIVATE_KEY", str(JWT_KEY_DIR / "private.pem"))
KILN_JWT_KID = env("KILN_JWT_KID")
KILN_JWT_ISSUER = env("KILN_JWT_ISSUER", "https://kiln.local")
KILN_JWT_AUDIENCE = env("KILN_JWT_AUDIENCE", "kiln-api")
KILN_JWT_LEEWAY_SECONDS = min(env_int("KILN_JWT_LEEWAY_SECONDS", 10), 30)
KILN_JWT_JWKS_CACHE_SECONDS = env_int("KILN_JWT_JWKS_CACHE_SECONDS", 300)

# Login throttling (django-axes, kiln/identity/throttle.py, docs/identity.md): failed session
# logins counted per username and per client address, each locked on its own at the limit
# until the cool-off has passed. Bearer tokens never reach it.
KILN_LOGIN_THROTTLE = env_bool("KILN_LOGIN_THROTTLE", True)
KILN_LOGIN_FAILURE_LIMIT = env_int("KILN_LOGIN_FAILURE_LIMIT", 5)
KILN_LOGIN_COOLOFF_MINUTES = env_float("KILN_LOGIN_COOLOFF_MINUTES", 15.0)
KILN_LOGIN_PROXY_HOPS = env_int("KILN_LOGIN_PROXY_HOPS", 0)
if KILN_LOGIN_FAILURE_LIMIT < 1:
    raise ImproperlyConfigured("KILN_LOGIN_FAILURE_LIMIT must be at least 1")
if not 0 < KILN_LOGIN_COOLOFF_MINUTES <= 7 * 24 * 60:
    raise ImproperlyConfigured("KILN_LOGIN_COOLOFF_MINUTES must be above 0 and at most a week")
if KILN_LOGIN_PROXY_HOPS < 0:
    raise ImproperlyConfigured("KILN_LOGIN_PROXY_HOPS must be 0 or more")
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses a locked-out login before the password
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = KILN_LOGIN_THROTTLE
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"  # SQLite and PostgreSQL alike
AXES_FAILURE_LIMIT = KILN_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=KILN_LOGIN_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # each one on its own, not the pair
AXES_RESET_ON_SUCCESS = False  # one good password must not wipe an address's failures
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False  # the cool-off ends when it says
AXES_DISABLE_ACCESS_LOG = True  # successful logins write nothing
AXES_ENABLE_ADMIN = False  # unaudited edits; `manage.py axes_reset_username` unlocks early
AXES_CLIENT_IP_CALLABLE = "kiln.identity.throttle.client_address"
AXES_LOCKOUT_CALLABLE = "kiln.identity.throttle.lockout_response"
AXES_VERBOSE = False
AXES_SENSITIVE_PARAMETERS = ["csrfmiddlewaretoken"]  # kept masked in the stored attempt

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "kiln.identity.authentication.JWTAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Authenticated and holding a Kiln role; only /api/v1/me/ answers a role-less caller.
    "DEFAULT_PERMISSION_CLASSES": ["kiln.identity.drf.HasKilnRole"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "kiln.errors.api_exception_handler",
    "DEFAULT_PAGINATION_CLASS": "kiln.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # Strict JSON (no NUL, no overflow to infinity, bounded depth and size); forms as DRF's.
    "DEFAULT_PARSER_CLASSES": [
        "kiln.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Kiln API",
    "DESCRIPTION": "Environments, scheduling, canary rollouts, chaos experiments and the audit chain.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # The API parses JSON bodies only in the documented shape; form encodings are not its contract.
    "PARSER_WHITELIST": ["rest_framework.parsers.JSONParser"],
    "ENUM_NAME_OVERRIDES": {
        "EnvironmentStatusEnum": "portal.api_schema.ENVIRONMENT_STATUSES",
        "StepStatusEnum": "portal.api_schema.STEP_STATUSES",
        "RolloutStatusEnum": "canary.models.RolloutStatus",
        "ExperimentStatusEnum": "canary.chaos.api_schema.EXPERIMENT_STATUSES",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "kiln.openapi.postprocess",
    ],
}

# --- security ----------------------------------------------------------------

SECURE_COOKIES = env_bool("KILN_SECURE_COOKIES", not STANDALONE)
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SECURE_HSTS_SECONDS = env_int("KILN_HSTS_SECONDS", 0 if STANDALONE else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not STANDALONE
SECURE_SSL_REDIRECT = env_bool("KILN_SSL_REDIRECT", False)
if env_bool("KILN_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Scripts and styles come only from our own origin; no inline script anywhere.
CONTENT_SECURITY_POLICY = env(
    "KILN_CSP",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self' ws: wss:; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'none'",
)

# --- static ------------------------------------------------------------------

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise serves finders plus this (collectstatic)
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# --- observability -----------------------------------------------------------

OTEL_EXPORTER_OTLP_ENDPOINT = env("OTEL_EXPORTER_OTLP_ENDPOINT")
OTEL_SERVICE_NAME = env("OTEL_SERVICE_NAME", "kiln")
KILN_TRACING = env_bool("KILN_TRACING", True)

LOG_LEVEL = env("KILN_LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "kiln.logging.JSONFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "uvicorn.access": {"level": "WARNING"},
        "celery": {"level": "WARNING"},
        # The CEL engine logs each transpiled expression (INFO) and each evaluation error (ERROR);
        # the policy gate reports every error as a denial with its reason instead.
        "celpy": {"level": "CRITICAL"},
    },
}

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
KILN_AUDIT_RELAY_ON_COMMIT = env_bool("KILN_AUDIT_RELAY_ON_COMMIT", True)
KILN_AUDIT_ORIGIN = env("KILN_AUDIT_ORIGIN", "kiln.local/audit")
# Ed25519 PEM private key signing checkpoints; unset: a dev key generated under var/audit/.
KILN_AUDIT_SIGNING_KEY = env("KILN_AUDIT_SIGNING_KEY", str(VAR_DIR / "audit" / "checkpoint-key.pem"))
KILN_AUDIT_SIGNING_KEY_IS_DEV = env("KILN_AUDIT_SIGNING_KEY") is None or STANDALONE
# Anchors, comma-separated: dir:/path and/or git:/path/to/repo. Unset: a directory under var/audit/.
KILN_AUDIT_ANCHORS = env("KILN_AUDIT_ANCHORS", f"dir:{VAR_DIR / 'audit' / 'anchor'}")
KILN_AUDIT_WRITER_ROLE = env("KILN_AUDIT_WRITER_ROLE", "kiln_audit_writer")
KILN_AUDIT_APP_ROLE = env("KILN_AUDIT_APP_ROLE", "kiln_app")
CELERY_BEAT_SCHEDULE["audit-relay-sweep"] = {
    "task": "audit.tasks.relay_outbox",
    "schedule": KILN_AUDIT_SWEEP_SECONDS,
}

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
# kubernetes backend: API server URL and bearer token file (unset: kubeconfig / in-cluster).
KILN_KUBE_API_URL = env("KILN_KUBE_API_URL")
KILN_KUBE_TOKEN_FILE = env("KILN_KUBE_TOKEN_FILE")
KILN_KUBE_CA_FILE = env("KILN_KUBE_CA_FILE")

# --- environments (portal) ------------------------------------------------------
KILN_POLICY_DIR = env("KILN_POLICY_DIR", str(BASE_DIR / "deploy" / "policies"))
KILN_POLICY_TIMEOUT_SECONDS = env_float("KILN_POLICY_TIMEOUT_SECONDS", 2.0)
KILN_TEAM_LIMITS = env("KILN_TEAM_LIMITS", "cpu=128,memoryGi=512,gpu=8,environments=20")
KILN_DATASTORE_POOLS = env(
    "KILN_DATASTORE_POOLS", "etcd-a1:zone-a:30,etcd-a2:zone-a:30,etcd-b1:zone-b:30,etcd-c1:zone-c:30"
)
KILN_PROVISION_TIMEOUT_SECONDS = env_float("KILN_PROVISION_TIMEOUT_SECONDS", 900)
KILN_PROVISION_POLL_SECONDS = env_float("KILN_PROVISION_POLL_SECONDS", 0.5)
KILN_TEARDOWN_DEADLINE_SECONDS = env_float("KILN_TEARDOWN_DEADLINE_SECONDS", 300)
KILN_QUARANTINE_OWNER = env("KILN_QUARANTINE_OWNER", "")
KILN_REAP_INTERVAL_SECONDS = env_float("KILN_REAP_INTERVAL_SECONDS", 60)
CELERY_BEAT_SCHEDULE["portal-reap-expired"] = {
    "task": "portal.reap_expired",
    "schedule": KILN_REAP_INTERVAL_SECONDS,
}

# --- scheduler ---------------------------------------------------------------
# Score weights (each in [0, 1], summing to 1; checked when the app loads).
KILN_SCHEDULER_WEIGHT_COST = env_float("KILN_SCHEDULER_WEIGHT_COST", 0.5)
KILN_SCHEDULER_WEIGHT_PACKING = env_float("KILN_SCHEDULER_WEIGHT_PACKING", 0.3)
KILN_SCHEDULER_WEIGHT_RISK = env_float("KILN_SCHEDULER_WEIGHT_RISK", 0.2)
# Optional shared secret kube-scheduler sends as `Authorization: Bearer <token>` to the extender.
KILN_SCHEDULER_EXTENDER_TOKEN = env("KILN_SCHEDULER_EXTENDER_TOKEN")
KILN_SCHEDULER_MAX_BODY_BYTES = env_int("KILN_SCHEDULER_MAX_BODY_BYTES", 32 * 1024 * 1024)
KILN_SCHEDULER_SNAPSHOT_TTL_SECONDS = env_float("KILN_SCHEDULER_SNAPSHOT_TTL_SECONDS", 2.0)
# Where nodes sync from: simulated | kubernetes | none. Follows the delivery backend by default.
KILN_SCHEDULER_NODE_SOURCE = env(
    "KILN_SCHEDULER_NODE_SOURCE", "kubernetes" if KILN_DELIVERY_BACKEND == "kubernetes" else "simulated"
)
KILN_SCHEDULER_SYNC_SECONDS = env_float("KILN_SCHEDULER_SYNC_SECONDS", 15.0)
CELERY_BEAT_SCHEDULE["scheduler-nodes-resync"] = {
    "task": "scheduler.tasks.nodes_resync",
    "schedule": KILN_SCHEDULER_SYNC_SECONDS,
}
# Simulated cluster: per-kind readiness delays (zero | fast | realistic) times a scale.
KILN_SIM_DELAY_PROFILE = env("KILN_SIM_DELAY_PROFILE", "fast")
KILN_SIM_DELAY_SCALE = env_float("KILN_SIM_DELAY_SCALE", 1.0)
KILN_SIM_FINALIZER_SECONDS = env_float("KILN_SIM_FINALIZER_SECONDS", 1.0)

# --- chaos (docs/chaos.md): leader-election timings of fault leases, in seconds --------------

KILN_CHAOS_LEASE_DURATION = env_float("KILN_CHAOS_LEASE_DURATION", 15.0)
KILN_CHAOS_RENEW_DEADLINE = env_float("KILN_CHAOS_RENEW_DEADLINE", 10.0)
KILN_CHAOS_RETRY_PERIOD = env_float("KILN_CHAOS_RETRY_PERIOD", 2.0)
KILN_CHAOS_MAX_CLOCK_SKEW = env_float("KILN_CHAOS_MAX_CLOCK_SKEW", 1.0)
KILN_CHAOS_REVERT_BUDGET = env_float("KILN_CHAOS_REVERT_BUDGET", 2.0)
KILN_CHAOS_REAPER_PERIOD = env_float("KILN_CHAOS_REAPER_PERIOD", 5.0)
KILN_CHAOS_LEASE_NAMESPACE = env("KILN_CHAOS_LEASE_NAMESPACE", "kiln-system")
# Start a controller task when an experiment starts (off for the crash benchmark, which runs its own).
KILN_CHAOS_AUTORUN = env_bool("KILN_CHAOS_AUTORUN", True)
CELERY_IMPORTS = ("canary.chaos.tasks",)
CELERY_BEAT_SCHEDULE["chaos-reaper"] = {
    "task": "chaos.tasks.chaos_reap",
    "schedule": KILN_CHAOS_REAPER_PERIOD,
}

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
CELERY_BEAT_SCHEDULE["canary-rollouts-tick-due"] = {
    "task": "canary.tasks.rollouts_tick_due",
    "schedule": KILN_CANARY_SWEEP_SECONDS,
}
