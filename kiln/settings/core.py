"""Django's own settings: apps, middleware, URLs and templates, the database, caches and
channel layers, security headers and cookies, static files, tracing and logs."""

from __future__ import annotations

import importlib.util

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from kiln import proxies
from kiln.dbpool import reset_connection
from kiln.settings.environ import (
    BASE_DIR,
    DATABASE_URL,
    REDIS_URL,
    STANDALONE,
    VAR_DIR,
    env,
    env_bool,
    env_float,
    env_int,
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
# Benchmarks, load tests and demos: a development-only app, present with the development
# requirements (pytest is one of them) and absent from the production image.
if importlib.util.find_spec("pytest") is not None and (BASE_DIR / "bench" / "apps.py").exists():
    INSTALLED_APPS.append("bench.apps.BenchConfig")

MIDDLEWARE = [
    "kiln.streaming.AsyncStreamingMiddleware",  # first: sees every streamed response (ASGI)
    "django.middleware.security.SecurityMiddleware",
    "kiln.middleware.ContentSecurityPolicyMiddleware",
    "kiln.middleware.NoStoreMiddleware",  # above sessions: reads the user after the view
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
KILN_WEBSOCKET_ROUTES = ("canary.routing", "portal.routing", "canary.chaos.routing")
# Web and worker pool processes freeze their startup objects out of full garbage collections
# (kiln/heap.py); 0 turns it off, to compare.
KILN_GC_FREEZE = env_bool("KILN_GC_FREEZE", True)
# Public tile and proof GETs are answered beside the middleware (kiln/fast_reads.py); 0 sends
# them through Django like every other request, to compare (`manage.py audit_tlog_bench`).
KILN_FAST_READS = env_bool("KILN_FAST_READS", True)

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
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_health_checks=True)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool(
        "KILN_DB_DEFER_ROWS", True
    ):
        # Django's backend plus deferred rows written together (the audit outbox); 0 keeps
        # Django's own, to compare (`manage.py audit_bench`).
        DATABASES["default"]["ENGINE"] = "kiln.postgresql"
    # Under ASGI every in-flight request runs its sync code in a thread of its own, so a
    # connection kept per thread (CONN_MAX_AGE > 0) grows with concurrency until PostgreSQL
    # refuses more. A bounded psycopg pool per process instead: at most KILN_DB_POOL_MAX
    # connections, a request waits up to KILN_DB_POOL_TIMEOUT seconds for one and then gets a
    # 503 (kiln.views.server_error). KILN_DB_POOL_MAX=0: no pool, a connection per request.
    KILN_DB_POOL_MAX = env_int("KILN_DB_POOL_MAX", 10)
    KILN_DB_POOL_MIN = env_int("KILN_DB_POOL_MIN", 1)
    KILN_DB_POOL_TIMEOUT = env_float("KILN_DB_POOL_TIMEOUT", 5.0)
    if KILN_DB_POOL_MAX < 0 or not 0 <= KILN_DB_POOL_MIN <= max(KILN_DB_POOL_MAX, 0):
        raise ImproperlyConfigured(
            "KILN_DB_POOL_MAX must be >= 0 and KILN_DB_POOL_MIN between 0 and KILN_DB_POOL_MAX"
        )
    if KILN_DB_POOL_TIMEOUT <= 0:
        raise ImproperlyConfigured("KILN_DB_POOL_TIMEOUT must be a positive number of seconds")
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # a pool requires it; without one: per request
    # The planner's price of a random page read. PostgreSQL's default, 4, is for spinning disks:
    # with it the audit writer's and relay's batch lookups by a unique index (a thousand ids at
    # a time) were planned as scans of the whole table until it held about 300,000 rows (21.8
    # ms a batch at 160,000 chain rows, against 6.3 ms through the index). 1.1 is the usual
    # value for data in memory or on SSD; a libpq option, so it holds for every connection.
    KILN_DB_RANDOM_PAGE_COST = env_float("KILN_DB_RANDOM_PAGE_COST", 1.1)
    if KILN_DB_RANDOM_PAGE_COST <= 0:
        raise ImproperlyConfigured("KILN_DB_RANDOM_PAGE_COST must be a positive number")
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options["options"] = " ".join(
        filter(None, [_options.get("options"), f"-c random_page_cost={KILN_DB_RANDOM_PAGE_COST}"])
    )
    if KILN_DB_POOL_MAX:
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": KILN_DB_POOL_MIN,
            "max_size": KILN_DB_POOL_MAX,
            "timeout": KILN_DB_POOL_TIMEOUT,
            "reset": reset_connection,
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
    # A consumer waits for its messages with BZPOPMIN for 5 s (channels_redis's brpop_timeout),
    # and redis-py 8 reads with a 5 s socket timeout by default: the blocked read and the
    # timeout race, a loaded event loop loses it, and the consumer dies of a TimeoutError,
    # dropping its websocket (the load test's dashboards "closed early"). The read must outlast
    # the wait, with room for a busy event loop.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}]},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# An open websocket asks again this often whether its caller is still signed in and may still
# see what it streams (kiln/websocket.py); a token's exp closes it on time regardless.
KILN_WS_RECHECK_SECONDS = env_float("KILN_WS_RECHECK_SECONDS", 2.0)
if not 0.05 <= KILN_WS_RECHECK_SECONDS <= 60:
    raise ImproperlyConfigured("KILN_WS_RECHECK_SECONDS must be between 0.05 and 60")

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
# The proxies whose X-Forwarded-For is believed (kiln/proxies.py), by uvicorn (every launcher
# passes them as --forwarded-allow-ips) and by Kiln's client address (login throttling).
# Empty, the default: nobody's; the connection's peer is the client.
try:
    KILN_TRUSTED_PROXIES = proxies.parse_trusted_proxies(env("KILN_TRUSTED_PROXIES", "") or "")
except ValueError as exc:
    raise ImproperlyConfigured(f"KILN_TRUSTED_PROXIES: {exc}") from exc

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
STATIC_ROOT.mkdir(
    parents=True, exist_ok=True
)  # whitenoise serves finders plus this (collectstatic)
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
    "filters": {
        "client_error": {"()": "kiln.logging.ClientErrorWithoutTraceback"},
        "cancelled_request": {"()": "kiln.logging.CancelledRequestContext"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # A 403 or 404 is one line, not a traceback (kiln.logging.ClientErrorWithoutTraceback).
        "django.request": {"filters": ["client_error"]},
        # A request the client abandoned leaves its span context to detach elsewhere: one line.
        "opentelemetry.context": {"filters": ["cancelled_request"]},
        "uvicorn.access": {"level": "WARNING"},
        "celery": {"level": "WARNING"},
        # The CEL engine logs each transpiled expression (INFO) and each evaluation error (ERROR);
        # the policy gate reports every error as a denial with its reason instead.
        "celpy": {"level": "CRITICAL"},
    },
}
