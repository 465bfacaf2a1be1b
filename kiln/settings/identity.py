"""Who may do what: sign-in and password rules, bearer tokens (JWT, JWKS), login throttling,
and the REST API's authentication, permissions, errors and schema."""

from __future__ import annotations

from datetime import timedelta

from django.core.exceptions import ImproperlyConfigured

from kiln.settings.environ import VAR_DIR, env, env_bool, env_float, env_int

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

# Approvers approve requests and promote rollouts of the teams they belong to. A central change
# board that acts for every team is an explicit grant (kiln/identity/permissions.py, docs/identity.md).
KILN_APPROVERS_GLOBAL = env_bool("KILN_APPROVERS_GLOBAL", False)

# Login throttling (django-axes, kiln/identity/throttle.py, docs/identity.md): failed session
# logins counted per (username, client address) pair, and per client address over every
# username with a higher limit (spraying); each locked at its limit until the cool-off has
# passed. The client address believes KILN_TRUSTED_PROXIES only. Bearer tokens never reach it.
KILN_LOGIN_THROTTLE = env_bool("KILN_LOGIN_THROTTLE", True)
KILN_LOGIN_FAILURE_LIMIT = env_int("KILN_LOGIN_FAILURE_LIMIT", 5)
KILN_LOGIN_ADDRESS_FAILURE_LIMIT = env_int("KILN_LOGIN_ADDRESS_FAILURE_LIMIT", 20)
KILN_LOGIN_COOLOFF_MINUTES = env_float("KILN_LOGIN_COOLOFF_MINUTES", 15.0)
if KILN_LOGIN_FAILURE_LIMIT < 1:
    raise ImproperlyConfigured("KILN_LOGIN_FAILURE_LIMIT must be at least 1")
if KILN_LOGIN_ADDRESS_FAILURE_LIMIT < KILN_LOGIN_FAILURE_LIMIT:
    raise ImproperlyConfigured(
        "KILN_LOGIN_ADDRESS_FAILURE_LIMIT must be at least KILN_LOGIN_FAILURE_LIMIT "
        f"({KILN_LOGIN_FAILURE_LIMIT}): it counts every username's failures from one address"
    )
if not 0 < KILN_LOGIN_COOLOFF_MINUTES <= 7 * 24 * 60:
    raise ImproperlyConfigured("KILN_LOGIN_COOLOFF_MINUTES must be above 0 and at most a week")
if env("KILN_LOGIN_PROXY_HOPS") is not None:
    raise ImproperlyConfigured(
        "KILN_LOGIN_PROXY_HOPS is no longer read: list your proxies' addresses in "
        "KILN_TRUSTED_PROXIES instead (docs/configuration.md)"
    )
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses a locked-out login before the password
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = KILN_LOGIN_THROTTLE
AXES_HANDLER = "kiln.identity.throttle.LoginThrottleHandler"  # axes' database one, plus per address
AXES_FAILURE_LIMIT = KILN_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=KILN_LOGIN_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]  # the pair; the address alone: handler
AXES_RESET_ON_SUCCESS = False  # one good password must not wipe an address's failures
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False  # the cool-off ends when it says
AXES_DISABLE_ACCESS_LOG = True  # successful logins write nothing
AXES_ENABLE_ADMIN = False  # unaudited edits; `manage.py login_unlock` lifts a lock early
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
    # Bodies are JSON only, decoded strictly (no NUL, no unpaired surrogate, no overflow to
    # infinity, bounded depth and size): a form encoding is a 415, as docs/api.md says.
    "DEFAULT_PARSER_CLASSES": ["kiln.parsers.JSONParser"],
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
        "ApprovalDecisionEnum": "portal.api_schema.APPROVAL_DECISIONS",
        "PolicyStageEnum": "portal.api_schema.POLICY_STAGES",
        "PolicyOutcomeEnum": "portal.api_schema.POLICY_OUTCOMES",
        "StopConditionKindEnum": "canary.chaos.services.experiments.STOP_CONDITION_KINDS",
        "InjectionStateEnum": "canary.chaos.api_schema.INJECTION_STATES",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "kiln.openapi.postprocess",
    ],
}
