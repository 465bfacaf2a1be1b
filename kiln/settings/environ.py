"""What every settings module reads first: the environment helpers, the paths, and whether this
process runs standalone (refusing a production start without the shared Redis)."""

from __future__ import annotations

import os
from pathlib import Path

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
    """An integer from the environment, or `default` when unset."""
    return _env_number(name, default, int, "an integer")


def env_float(name: str, default: float) -> float:
    """A number from the environment, or `default` when unset."""
    return _env_number(name, default, float, "a number")


def _env_number(name: str, default, parse, what: str):
    value = env(name)
    if value is None:
        return default
    try:
        return parse(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be {what}, not {value!r}") from exc


BASE_DIR = Path(__file__).resolve().parent.parent.parent  # the checkout: manage.py, kiln/, ...
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
