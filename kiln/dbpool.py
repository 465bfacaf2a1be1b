"""The PostgreSQL connection pool's helpers (settings DATABASES, docs/configuration.md).

A pooled connection outlives the request or task that used it, so whatever a session set
must not follow it to the next borrower: `reset_connection` runs when a connection comes
back to the pool. `pool_exhausted` tells the error handler that a request waited the
bounded time for a connection and got none (an answer 503, not 500). A forked child (a
Celery prefork worker, a verification process) must not reuse its parent's pool: the idle
connections in it are the parent's sockets, and the pool's threads did not survive the fork.
"""

from __future__ import annotations

import os
import sys

import psycopg
from psycopg_pool import PoolTimeout


def reset_connection(conn: psycopg.Connection) -> None:
    """Undo session state before reuse: a role switch and session advisory locks.

    Prepared statements stay: they belong to this server connection and psycopg's cache on
    the same connection object still matches them. Both statements travel in one round trip
    (the simple query protocol takes several; no parameters): it runs at every return of a
    connection to the pool, every request's and every task's.
    """
    conn.execute("RESET ROLE; SELECT pg_advisory_unlock_all()")


def pool_exhausted(exc: BaseException | None) -> bool:
    """Whether `exc` (or what caused it) is the pool's wait for a free connection timing out."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, PoolTimeout):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


_inherited: list[object] = []  # a child's inherited pools: kept, so no finalizer touches a socket


def _forget_inherited_pools() -> None:
    """In a forked child: drop the parent's pools (Django opens a new one on first use).

    No network I/O: closing them would end the parent's sessions through the shared sockets.
    """
    backend = sys.modules.get("django.db.backends.postgresql.base")
    if backend is None:
        return
    pools = backend.DatabaseWrapper._connection_pools
    _inherited.extend(pools.values())
    pools.clear()


os.register_at_fork(after_in_child=_forget_inherited_pools)
