"""Audit operations: verification runs, database roles, exports."""

from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import Any

import psycopg
from celery import current_app
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from audit.models import VerificationRun
from audit.selectors import Segment, export_segment
from audit.services.recording import record
from kiln.errors import Forbidden, InvalidInput
from kiln.identity.permissions import (
    Actor,
    can_set_up_audit,
    can_store_verification,
    can_view_audit,
    system_actor,
)

log = logging.getLogger("kiln.audit")

# --- verification runs ---------------------------------------------------------------------


def verification_run_store(
    *,
    started_at: datetime,
    ok: bool,
    checked: int,
    checkpoints: int,
    first_bad_seq: int | None,
    message: str,
    actor: Actor | None = None,
) -> VerificationRun:
    """Store the outcome of a chain verification, audited (the audit verifier, the default actor)."""
    actor = actor or system_actor("audit-verifier")
    if not can_store_verification(actor):
        raise Forbidden(f"{actor} may not store verification runs")
    with transaction.atomic():
        run = VerificationRun.objects.create(
            started_at=started_at,
            finished_at=timezone.now(),
            ok=ok,
            checked=checked,
            checkpoints=checkpoints,
            first_bad_seq=first_bad_seq,
            message=message[:2000],
        )
        record(
            actor,
            "audit.chain.verified",
            run,
            {
                "ok": ok,
                "checked": checked,
                "first_bad_seq": first_bad_seq,
                "message": message[:500],
            },
        )
    return run


VERIFY_TASK = "audit.verify_chain"


def verification_request(*, actor: Actor) -> None:
    """Queue a verification of the whole chain ("Verify now"), audited as asked by `actor`."""
    if not can_view_audit(actor):
        raise Forbidden("only auditors and platform admins verify the audit chain")
    with transaction.atomic():
        record(actor, "audit.verification.requested", "audit.chain", {})
        transaction.on_commit(lambda: current_app.send_task(VERIFY_TASK))


# --- database roles ------------------------------------------------------------------------

# The tables the grants below name.
AUDIT_TABLES = frozenset(
    {
        "audit_chainevent",
        "audit_outboxevent",
        "audit_checkpoint",
        "audit_verificationrun",
        "audit_merkletile",
        "audit_cosignature",
    }
)
ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def roles_setup(*, writer_role: str, app_role: str, actor: Actor | None = None) -> list[str]:
    """Create the writer and application roles and grant them (PostgreSQL; idempotent).

    The writer role alone may INSERT into the chain; the application role may only
    SELECT it (and write the outbox). The connecting user becomes a member of the
    writer role so the writer process can `SET ROLE` to it. Platform admins and the audit
    setup (`audit.setup`, the default actor) only.
    """
    actor = actor or system_actor("audit-setup")
    if not can_set_up_audit(actor):
        raise Forbidden(f"{actor} may not create the audit chain's database roles")
    if connection.vendor != "postgresql":
        return ["no database roles on SQLite: the triggers keep the chain append-only"]
    for role in (writer_role, app_role):
        if not ROLE_NAME.match(role):
            raise InvalidInput(f"role name {role!r} is not a plain lowercase identifier")
    w, a = f'"{writer_role}"', f'"{app_role}"'
    done: list[str] = []
    try:
        connection.ensure_connection()
    except OperationalError:
        # The database does not exist yet (a fresh server before `migrate`, or a test run whose
        # test database pytest creates): roles are server-wide, so create them from the server's
        # maintenance database; grants follow once the tables exist.
        return _roles_create_on_server((writer_role, app_role))
    missing = sorted(AUDIT_TABLES - set(connection.introspection.table_names()))
    if missing:
        # Before `migrate` (or part-way through it) there is nothing to grant on yet.
        return [
            *_roles_create_on_server((writer_role, app_role)),
            f"audit tables not migrated yet ({', '.join(missing)}): run migrate, then again",
        ]
    with transaction.atomic(), connection.cursor() as cursor:
        for role in (writer_role, app_role):
            cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE ROLE "{role}" LOGIN')
                done.append(f"created role {role}")
        cursor.execute("SELECT current_database(), current_user")
        database, me = cursor.fetchone()
        statements = [
            f'GRANT CONNECT ON DATABASE "{database}" TO {w}, {a}',
            f"GRANT USAGE ON SCHEMA public TO {w}, {a}",
            f"REVOKE ALL ON audit_chainevent FROM PUBLIC, {w}, {a}",
            f"GRANT SELECT ON audit_chainevent TO {a}",
            f"GRANT SELECT, INSERT ON audit_chainevent TO {w}",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON audit_outboxevent TO {a}",
            f"GRANT SELECT, DELETE ON audit_outboxevent TO {w}",
            f"GRANT SELECT ON audit_checkpoint, audit_verificationrun TO {a}, {w}",
            f"REVOKE ALL ON audit_merkletile FROM PUBLIC, {w}, {a}",
            f"GRANT SELECT ON audit_merkletile TO {a}",
            f"GRANT SELECT, INSERT, UPDATE ON audit_merkletile TO {w}",
            # Witness cosignatures arrive over HTTP: the web process (the app role) stores them.
            f"GRANT SELECT, INSERT ON audit_cosignature TO {a}",
            f"GRANT SELECT ON audit_cosignature TO {w}",
        ]
        for table, role in (
            ("audit_outboxevent", a), ("audit_merkletile", w), ("audit_cosignature", a)
        ):  # fmt: skip
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
            sequence = cursor.fetchone()[0]
            if sequence:
                statements.append(f"GRANT USAGE, SELECT ON SEQUENCE {sequence} TO {role}")
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cursor.fetchone()[0]:
            statements.append(f'GRANT {w} TO "{me}"')
        for sql in statements:
            cursor.execute(sql)
        done.append(
            f"{writer_role}: SELECT, INSERT on the chain and its tiles; {app_role}: SELECT only "
            f"(database {database})"
        )
        record(
            actor,
            "audit.roles.configured",
            f"database:{database}",
            {"writer_role": writer_role, "app_role": app_role},
        )
    return done


def export_create(
    *, actor: Any, since: datetime | None, until: datetime | None, fmt: str
) -> Segment | None:
    """Choose the segment to export and record who exported what (`audit.export.created`)."""
    if not can_view_audit(actor):
        raise Forbidden(f"{actor} may not export the audit chain")
    segment = export_segment(since, until)
    with transaction.atomic():
        record(
            actor,
            "audit.export.created",
            "audit.chain",
            {
                "from": since.isoformat() if since else None,
                "to": until.isoformat() if until else None,
                "format": fmt,
                "first_seq": segment.first_seq if segment else None,
                "last_seq": segment.last_seq if segment else None,
            },
        )
    return segment


def _roles_create_on_server(roles: tuple[str, ...]) -> list[str]:
    """Create missing roles through the server's `postgres` database (no grants)."""
    db = connection.settings_dict
    done = []
    with psycopg.connect(
        host=db["HOST"] or None,
        port=db["PORT"] or None,
        user=db["USER"] or None,
        password=db["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    ) as server:
        for role in roles:
            if (
                server.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone()
                is None
            ):
                try:
                    server.execute(f'CREATE ROLE "{role}" LOGIN')
                    done.append(f"created role {role}")
                except psycopg.errors.DuplicateObject:  # another setup run created it first
                    done.append(f"role {role} was created concurrently")
    return [*done, f"roles {', '.join(roles)} exist on the server"]
