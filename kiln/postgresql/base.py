"""Django's PostgreSQL backend plus one addition: rows appended in a transaction travel together.

`DatabaseWrapper.defer_row(table, columns, values)` queues a row for `table` in the current
transaction instead of sending an INSERT at once. The queued rows are written together
(one INSERT of them all, or a COPY for many) just before anything else reaches the server on this connection:
the next statement through any of Django's cursors (a query, a savepoint, its release or
rollback), a COPY through one, or the commit. So every later statement of the transaction sees them,
exactly as if each had been inserted when it was queued, and a rollback (of the transaction,
or of a savepoint after they were written) takes them with it. A failure to write them is
raised, as Django's error, by the statement or commit that flushed them: the transaction
fails whole. Outside a transaction the row is written at once.

Why: the audit outbox gets one row per `audit.record()`, often several in one transaction.
On this kind of machine each round trip to the server costs about 100 µs of CPU between
client and server (`bench/results/audit_bench-*.json`, docs/audit.md), a quarter of the
400 µs a recorded event may cost in all for the end-to-end target (>= 5,000 events/s on
two cores); written together, a transaction's rows cost one round trip. Measured again with
and without (`KILN_DB_DEFER_ROWS=0` keeps Django's own engine), alternated on the shared
machine (`bench/results/audit_bench-defer-rows-2026-12-06.json`, docs/operations.md): recording
cost 42 against 578 µs of client CPU an event, and the end-to-end rate was 7.2 times higher, so
the target is met only with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from django.db.backends.postgresql import base
from django.db.backends.utils import CursorWrapper

# Rows written by one INSERT; more go by COPY. Chosen on a sweep of 1 to 100 rows a
# transaction (client and server CPU per row: a multi-row INSERT is cheapest from 2 to 10
# rows and COPY from there on), not on the benchmarks docs/audit.md reports.
INSERT_ROWS = 10


class _FlushFirst:
    """A cursor wrapper that writes the connection's deferred rows before what it sends."""

    db: DatabaseWrapper
    cursor: Any

    def execute(self, sql, params=None):
        self.db.flush_deferred()
        return super().execute(sql, params)

    def executemany(self, sql, param_list):
        self.db.flush_deferred()
        return super().executemany(sql, param_list)

    def callproc(self, procname, params=None, kparams=None):
        self.db.flush_deferred()
        return super().callproc(procname, params, kparams)

    def copy(self, statement):
        """psycopg's COPY (the debug wrapper logs it; the plain one passes it through)."""
        self.db.flush_deferred()
        parent = getattr(super(), "copy", None)
        return parent(statement) if parent is not None else self.cursor.copy(statement)


class FlushingCursorWrapper(_FlushFirst, CursorWrapper):
    """Django's cursor wrapper, writing deferred rows first."""


class FlushingCursorDebugWrapper(_FlushFirst, base.CursorDebugWrapper):
    """Django's PostgreSQL debug cursor wrapper (query capture), writing deferred rows first."""


class DatabaseWrapper(base.DatabaseWrapper):
    """Django's PostgreSQL connection with `defer_row` (see the module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._deferred: dict[tuple[str, tuple[str, ...]], list[Sequence[Any]]] = {}

    def defer_row(self, table: str, columns: Sequence[str], values: Sequence[Any]) -> None:
        """Queue one row for `table` in the current transaction (written at once outside one).

        `table` and `columns` are the caller's own constants, never input: they are quoted
        as identifiers all the same.
        """
        if len(columns) != len(values):
            raise ValueError(f"{len(columns)} columns but {len(values)} values")
        self._deferred.setdefault((table, tuple(columns)), []).append(tuple(values))
        if not self.in_atomic_block:
            self.flush_deferred()

    def flush_deferred(self) -> None:
        """Write every queued row now, a table at a time, in the order they were queued.

        Up to `INSERT_ROWS` rows: one INSERT of them all, with bound parameters (psycopg
        prepares a statement text it has run five times, so the common one-row INSERT is a
        prepared statement). More: one COPY, whose fixed cost (about three one-row INSERTs
        here) a large batch repays at a few µs a row.
        """
        if not self._deferred:
            return
        batches, self._deferred = self._deferred, {}
        self.ensure_connection()
        quote = self.ops.quote_name
        with self.wrap_database_errors, psycopg.Cursor(self.connection) as cursor:
            for (table, columns), rows in batches.items():
                names = f"{quote(table)} ({', '.join(quote(c) for c in columns)})"
                if len(rows) > INSERT_ROWS:
                    with cursor.copy(f"COPY {names} FROM STDIN") as copy:
                        for row in rows:
                            copy.write_row(row)
                    continue
                one = f"({', '.join(['%s'] * len(columns))})"
                cursor.execute(
                    f"INSERT INTO {names} VALUES {', '.join([one] * len(rows))}",  # noqa: S608 - quoted identifiers, bound values
                    [value for row in rows for value in row],
                )

    def deferred_rows(self) -> int:
        """How many rows are queued and not yet written."""
        return sum(len(rows) for rows in self._deferred.values())

    def make_cursor(self, cursor):
        return FlushingCursorWrapper(cursor, self)

    def make_debug_cursor(self, cursor):
        return FlushingCursorDebugWrapper(cursor, self)

    def _commit(self):
        self.flush_deferred()
        return super()._commit()

    def _rollback(self):
        self._deferred = {}
        return super()._rollback()

    def _close(self):
        self._deferred = {}  # an open transaction ends with the connection: its rows too
        return super()._close()
