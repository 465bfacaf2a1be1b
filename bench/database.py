"""This process's database as a URL, for the processes a benchmark starts (a worker, a server,
the chaos reaper) to open the same one: under pytest, the test database."""

from __future__ import annotations

from django.db import connections


def database_url() -> str | None:
    """`postgres://user[:password]@host:port/name` of the default database, or None when it is
    not PostgreSQL (SQLite's file is this process's own: no other process shares it)."""
    db = connections["default"].settings_dict
    if not db["ENGINE"].endswith("postgresql"):
        return None
    auth = db.get("USER") or ""
    if db.get("PASSWORD"):
        auth += f":{db['PASSWORD']}"
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"
