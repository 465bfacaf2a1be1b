"""Database triggers that make the chain table append-only, for PostgreSQL and SQLite.

UPDATE and DELETE are rejected row by row; TRUNCATE is rejected while the chain
holds rows (emptying an empty table loses nothing, and test databases flush it);
an INSERT must extend the head: seq = head seq + 1 and prev_hash = head hash.

The Merkle tiles (`TILE_STATEMENTS`) only grow: an UPDATE must keep the tile's
level and index and extend its hashes (the old ones a prefix of the new), DELETE is
rejected, and TRUNCATE is rejected while tiles exist.

Witness cosignatures (`cosignature_statements`) are append-only as the chain is: UPDATE
and DELETE are rejected, TRUNCATE while any is stored.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

# ruff: noqa: S608 - DDL built from module constants only

TABLE = "audit_chainevent"
GENESIS = "0" * 64

POSTGRESQL_CREATE = [
    f"""
CREATE OR REPLACE FUNCTION audit_chain_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' AND NOT EXISTS (SELECT 1 FROM {TABLE}) THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'audit chain is append-only: % rejected', TG_OP USING ERRCODE = 'insufficient_privilege';
END
$$""",
    f"""
CREATE OR REPLACE FUNCTION audit_chain_check_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  head_seq bigint;
  head_hash varchar;
BEGIN
  SELECT seq, hash INTO head_seq, head_hash FROM {TABLE} ORDER BY seq DESC LIMIT 1;
  IF head_seq IS NULL THEN
    head_seq := 0;
    head_hash := '{GENESIS}';
  END IF;
  IF NEW.seq IS DISTINCT FROM head_seq + 1 THEN
    RAISE EXCEPTION 'audit chain insert rejected: seq % does not extend head %', NEW.seq, head_seq
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.prev_hash IS DISTINCT FROM head_hash THEN
    RAISE EXCEPTION 'audit chain insert rejected: prev_hash of seq % is not the head hash', NEW.seq
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END
$$""",
    f"DROP TRIGGER IF EXISTS audit_chain_no_change ON {TABLE}",
    f"""CREATE TRIGGER audit_chain_no_change BEFORE UPDATE OR DELETE ON {TABLE}
        FOR EACH ROW EXECUTE FUNCTION audit_chain_reject_change()""",
    f"DROP TRIGGER IF EXISTS audit_chain_no_truncate ON {TABLE}",
    f"""CREATE TRIGGER audit_chain_no_truncate BEFORE TRUNCATE ON {TABLE}
        FOR EACH STATEMENT EXECUTE FUNCTION audit_chain_reject_change()""",
    f"DROP TRIGGER IF EXISTS audit_chain_extend ON {TABLE}",
    f"""CREATE TRIGGER audit_chain_extend BEFORE INSERT ON {TABLE}
        FOR EACH ROW EXECUTE FUNCTION audit_chain_check_insert()""",
]

POSTGRESQL_DROP = [
    f"DROP TRIGGER IF EXISTS audit_chain_extend ON {TABLE}",
    f"DROP TRIGGER IF EXISTS audit_chain_no_truncate ON {TABLE}",
    f"DROP TRIGGER IF EXISTS audit_chain_no_change ON {TABLE}",
    "DROP FUNCTION IF EXISTS audit_chain_check_insert()",
    "DROP FUNCTION IF EXISTS audit_chain_reject_change()",
]

# SQLite has no TRUNCATE: `DELETE FROM t` is its truncate, and the DELETE trigger
# disables that optimisation, so every row passes through the trigger.
SQLITE_CREATE = [
    f"""CREATE TRIGGER IF NOT EXISTS audit_chain_no_update BEFORE UPDATE ON {TABLE}
        BEGIN SELECT RAISE(ABORT, 'audit chain is append-only: UPDATE rejected'); END""",
    f"""CREATE TRIGGER IF NOT EXISTS audit_chain_no_delete BEFORE DELETE ON {TABLE}
        BEGIN SELECT RAISE(ABORT, 'audit chain is append-only: DELETE rejected'); END""",
    f"""CREATE TRIGGER IF NOT EXISTS audit_chain_extend BEFORE INSERT ON {TABLE}
        BEGIN
          SELECT RAISE(ABORT, 'audit chain insert rejected: seq does not extend the head')
            WHERE NEW.seq IS NOT COALESCE((SELECT MAX(seq) FROM {TABLE}), 0) + 1;
          SELECT RAISE(ABORT, 'audit chain insert rejected: prev_hash is not the head hash')
            WHERE NEW.prev_hash IS NOT COALESCE(
              (SELECT hash FROM {TABLE} ORDER BY seq DESC LIMIT 1), '{GENESIS}');
        END""",
]

SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS audit_chain_extend",
    "DROP TRIGGER IF EXISTS audit_chain_no_delete",
    "DROP TRIGGER IF EXISTS audit_chain_no_update",
]


def statements(vendor: str, *, create: bool) -> list[str]:
    """The trigger DDL for a database vendor (`postgresql` or `sqlite`)."""
    if vendor == "postgresql":
        return POSTGRESQL_CREATE if create else POSTGRESQL_DROP
    if vendor == "sqlite":
        return SQLITE_CREATE if create else SQLITE_DROP
    # The chain's append-only guarantee is enforced by the database: refuse any other one.
    raise ImproperlyConfigured(
        f"the audit chain needs PostgreSQL or SQLite to enforce it; {vendor} is not supported"
    )


TILES = "audit_merkletile"

POSTGRESQL_TILES_CREATE = [
    """
CREATE OR REPLACE FUNCTION audit_tile_check_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.level IS DISTINCT FROM OLD.level OR NEW.index IS DISTINCT FROM OLD.index
     OR length(NEW.hashes) < length(OLD.hashes)
     OR substring(NEW.hashes FROM 1 FOR length(OLD.hashes)) IS DISTINCT FROM OLD.hashes THEN
    RAISE EXCEPTION 'audit Merkle tile %/% may only grow', OLD.level, OLD.index
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END
$$""",
    f"""
CREATE OR REPLACE FUNCTION audit_tile_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' AND NOT EXISTS (SELECT 1 FROM {TILES}) THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'audit Merkle tiles only grow: % rejected', TG_OP USING ERRCODE = 'insufficient_privilege';
END
$$""",
    f"DROP TRIGGER IF EXISTS audit_tile_grow ON {TILES}",
    f"""CREATE TRIGGER audit_tile_grow BEFORE UPDATE ON {TILES}
        FOR EACH ROW EXECUTE FUNCTION audit_tile_check_update()""",
    f"DROP TRIGGER IF EXISTS audit_tile_no_delete ON {TILES}",
    f"""CREATE TRIGGER audit_tile_no_delete BEFORE DELETE ON {TILES}
        FOR EACH ROW EXECUTE FUNCTION audit_tile_reject_change()""",
    f"DROP TRIGGER IF EXISTS audit_tile_no_truncate ON {TILES}",
    f"""CREATE TRIGGER audit_tile_no_truncate BEFORE TRUNCATE ON {TILES}
        FOR EACH STATEMENT EXECUTE FUNCTION audit_tile_reject_change()""",
]

POSTGRESQL_TILES_DROP = [
    f"DROP TRIGGER IF EXISTS audit_tile_no_truncate ON {TILES}",
    f"DROP TRIGGER IF EXISTS audit_tile_no_delete ON {TILES}",
    f"DROP TRIGGER IF EXISTS audit_tile_grow ON {TILES}",
    "DROP FUNCTION IF EXISTS audit_tile_reject_change()",
    "DROP FUNCTION IF EXISTS audit_tile_check_update()",
]

SQLITE_TILES_CREATE = [
    f"""CREATE TRIGGER IF NOT EXISTS audit_tile_grow BEFORE UPDATE ON {TILES}
        BEGIN
          SELECT RAISE(ABORT, 'audit Merkle tiles may only grow')
            WHERE NEW.level IS NOT OLD.level OR NEW."index" IS NOT OLD."index"
               OR length(NEW.hashes) < length(OLD.hashes)
               OR substr(NEW.hashes, 1, length(OLD.hashes)) IS NOT OLD.hashes;
        END""",
    f"""CREATE TRIGGER IF NOT EXISTS audit_tile_no_delete BEFORE DELETE ON {TILES}
        BEGIN SELECT RAISE(ABORT, 'audit Merkle tiles only grow: DELETE rejected'); END""",
]

SQLITE_TILES_DROP = [
    "DROP TRIGGER IF EXISTS audit_tile_no_delete",
    "DROP TRIGGER IF EXISTS audit_tile_grow",
]


def tile_statements(vendor: str, *, create: bool) -> list[str]:
    """The Merkle tiles' trigger DDL for a database vendor (`postgresql` or `sqlite`)."""
    statements(vendor, create=create)  # refuses any other vendor, with the reason
    if vendor == "postgresql":
        return POSTGRESQL_TILES_CREATE if create else POSTGRESQL_TILES_DROP
    return SQLITE_TILES_CREATE if create else SQLITE_TILES_DROP


COSIGNATURES = "audit_cosignature"

POSTGRESQL_COSIGNATURES_CREATE = [
    f"""
CREATE OR REPLACE FUNCTION audit_cosignature_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' AND NOT EXISTS (SELECT 1 FROM {COSIGNATURES}) THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'audit cosignatures are append-only: % rejected', TG_OP USING ERRCODE = 'insufficient_privilege';
END
$$""",
    f"DROP TRIGGER IF EXISTS audit_cosignature_no_change ON {COSIGNATURES}",
    f"""CREATE TRIGGER audit_cosignature_no_change BEFORE UPDATE OR DELETE ON {COSIGNATURES}
        FOR EACH ROW EXECUTE FUNCTION audit_cosignature_reject_change()""",
    f"DROP TRIGGER IF EXISTS audit_cosignature_no_truncate ON {COSIGNATURES}",
    f"""CREATE TRIGGER audit_cosignature_no_truncate BEFORE TRUNCATE ON {COSIGNATURES}
        FOR EACH STATEMENT EXECUTE FUNCTION audit_cosignature_reject_change()""",
]

POSTGRESQL_COSIGNATURES_DROP = [
    f"DROP TRIGGER IF EXISTS audit_cosignature_no_truncate ON {COSIGNATURES}",
    f"DROP TRIGGER IF EXISTS audit_cosignature_no_change ON {COSIGNATURES}",
    "DROP FUNCTION IF EXISTS audit_cosignature_reject_change()",
]

SQLITE_COSIGNATURES_CREATE = [
    f"""CREATE TRIGGER IF NOT EXISTS audit_cosignature_no_update BEFORE UPDATE ON {COSIGNATURES}
        BEGIN SELECT RAISE(ABORT, 'audit cosignatures are append-only: UPDATE rejected'); END""",
    f"""CREATE TRIGGER IF NOT EXISTS audit_cosignature_no_delete BEFORE DELETE ON {COSIGNATURES}
        BEGIN SELECT RAISE(ABORT, 'audit cosignatures are append-only: DELETE rejected'); END""",
]

SQLITE_COSIGNATURES_DROP = [
    "DROP TRIGGER IF EXISTS audit_cosignature_no_delete",
    "DROP TRIGGER IF EXISTS audit_cosignature_no_update",
]


def cosignature_statements(vendor: str, *, create: bool) -> list[str]:
    """The witness cosignatures' trigger DDL for a database vendor (`postgresql` or `sqlite`)."""
    statements(vendor, create=create)  # refuses any other vendor, with the reason
    if vendor == "postgresql":
        return POSTGRESQL_COSIGNATURES_CREATE if create else POSTGRESQL_COSIGNATURES_DROP
    return SQLITE_COSIGNATURES_CREATE if create else SQLITE_COSIGNATURES_DROP
