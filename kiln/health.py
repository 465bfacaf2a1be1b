"""Readiness checks. Apps register extra checks (the audit writer's lag) in their AppConfig.ready().

The web's /readyz runs every registered check; the other process kinds run the checks that
matter to them (`run`, kiln/metrics_server.py): a worker or beat whose broker does not answer
is not ready.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis as redis_lib
from django.conf import settings
from django.db import connection

Check = Callable[[], dict[str, Any]]
_checks: dict[str, Check] = {}


def register(name: str, check: Check) -> None:
    """Add a readiness check; it returns a dict with at least `ok: bool`."""
    _checks[name] = check


def database() -> dict[str, Any]:
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {
        "ok": True,
        "vendor": connection.vendor,
        "ms": round((time.perf_counter() - started) * 1000, 2),
    }


def redis() -> dict[str, Any]:
    if not settings.REDIS_URL:
        return {"ok": True, "mode": "standalone (in-process transports)"}
    started = time.perf_counter()
    client = redis_lib.Redis.from_url(
        settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
    )
    try:
        client.ping()
    finally:
        client.close()
    return {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 2)}


def broker() -> dict[str, Any]:
    """The Celery broker answers (a Redis PING; the in-process memory transport always does)."""
    url = settings.CELERY_BROKER_URL
    if not url.startswith(("redis://", "rediss://")):
        return {"ok": True, "mode": url.split(":", 1)[0]}
    started = time.perf_counter()
    client = redis_lib.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    try:
        client.ping()
    finally:
        client.close()
    return {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 2)}


register("database", database)
register("redis", redis)


def run_checks() -> tuple[bool, dict[str, dict[str, Any]]]:
    """Run every registered check; a check that raises is a failure named by its exception class."""
    return run(dict(_checks))


def run(checks: dict[str, Check]) -> tuple[bool, dict[str, dict[str, Any]]]:
    """Run these checks; a check that raises is a failure whose reason is its exception class."""
    results: dict[str, dict[str, Any]] = {}
    for name, check in list(checks.items()):
        try:
            results[name] = check()
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready", reported by name
            results[name] = {"ok": False, "error": exc.__class__.__name__}
    return all(r.get("ok") for r in results.values()), results
