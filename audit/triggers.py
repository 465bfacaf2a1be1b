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
TILES = "audit_merkletile"
COSIGNATURES = "audit_cosignature"
GENESIS = "0" * 64


def _pg_refusal(table: str, function: str, refusal: str) -> str:
    """A PL/pgSQL trigger function that rejects the change (`refusal: <op> rejected`), but lets
    TRUNCATE of an empty table pass (emptying it loses nothing, and test databases flush it)."""
    return f"""
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' AND NOT EXISTS (SELECT 1 FROM {table}) THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION '{refusal}: % rejected', TG_OP USING ERRCODE = 'insufficient_privilege';
END
$$"""


def _postgresql(
    table: str, functions: dict[str, str], triggers: list[tuple[str, str, str]]
) -> tuple[list[str], list[str]]:
    """The DDL that creates `functions` (name: definition) and the `triggers` (name, event,
    function) on `table`, and the DDL that drops them again in reverse order. A TRUNCATE
    trigger fires once for the statement, the others for each row."""
    create = list(functions.values())
    for name, event, function in triggers:
        each = "STATEMENT" if event == "TRUNCATE" else "ROW"
        create.append(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        create.append(
            f"""CREATE TRIGGER {name} BEFORE {event} ON {table}
        FOR EACH {each} EXECUTE FUNCTION {function}()"""
        )
    drop = [f"DROP TRIGGER IF EXISTS {name} ON {table}" for name, _, _ in reversed(triggers)]
    drop += [f"DROP FUNCTION IF EXISTS {function}()" for function in reversed(functions)]
    return create, drop


def _sqlite_refusal(table: str, name: str, event: str, refusal: str) -> str:
    """A SQLite trigger that aborts every `event` on `table` with `refusal: <EVENT> rejected`."""
    return f"""CREATE TRIGGER IF NOT EXISTS {name} BEFORE {event} ON {table}
        BEGIN SELECT RAISE(ABORT, '{refusal}: {event} rejected'); END"""


def _sqlite(triggers: dict[str, str]) -> tuple[list[str], list[str]]:
    """The DDL that creates `triggers` (name: definition), and the DDL that drops them in reverse."""
    return list(triggers.values()), [
        f"DROP TRIGGER IF EXISTS {name}" for name in reversed(triggers)
    ]


# --- the chain ----------------------------------------------------------------

_CHAIN_CHECK_INSERT = f"""
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
$$"""

POSTGRESQL_CREATE, POSTGRESQL_DROP = _postgresql(
    TABLE,
    {
        "audit_chain_reject_change": _pg_refusal(
            TABLE, "audit_chain_reject_change", "audit chain is append-only"
        ),
        "audit_chain_check_insert": _CHAIN_CHECK_INSERT,
    },
    [
        ("audit_chain_no_change", "UPDATE OR DELETE", "audit_chain_reject_change"),
        ("audit_chain_no_truncate", "TRUNCATE", "audit_chain_reject_change"),
        ("audit_chain_extend", "INSERT", "audit_chain_check_insert"),
    ],
)

# SQLite has no TRUNCATE: `DELETE FROM t` is its truncate, and the DELETE trigger
# disables that optimisation, so every row passes through the trigger.
SQLITE_CREATE, SQLITE_DROP = _sqlite(
    {
        "audit_chain_no_update": _sqlite_refusal(
            TABLE, "audit_chain_no_update", "UPDATE", "audit chain is append-only"
        ),
        "audit_chain_no_delete": _sqlite_refusal(
            TABLE, "audit_chain_no_delete", "DELETE", "audit chain is append-only"
        ),
        "audit_chain_extend": f"""CREATE TRIGGER IF NOT EXISTS audit_chain_extend BEFORE INSERT ON {TABLE}
        BEGIN
          SELECT RAISE(ABORT, 'audit chain insert rejected: seq does not extend the head')
            WHERE NEW.seq IS NOT COALESCE((SELECT MAX(seq) FROM {TABLE}), 0) + 1;
          SELECT RAISE(ABORT, 'audit chain insert rejected: prev_hash is not the head hash')
            WHERE NEW.prev_hash IS NOT COALESCE(
              (SELECT hash FROM {TABLE} ORDER BY seq DESC LIMIT 1), '{GENESIS}');
        END""",
    }
)


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


# --- the Merkle tiles ---------------------------------------------------------

_TILE_CHECK_UPDATE = """
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
$$"""

POSTGRESQL_TILES_CREATE, POSTGRESQL_TILES_DROP = _postgresql(
    TILES,
    {
        "audit_tile_check_update": _TILE_CHECK_UPDATE,
        "audit_tile_reject_change": _pg_refusal(
            TILES, "audit_tile_reject_change", "audit Merkle tiles only grow"
        ),
    },
    [
        ("audit_tile_grow", "UPDATE", "audit_tile_check_update"),
        ("audit_tile_no_delete", "DELETE", "audit_tile_reject_change"),
        ("audit_tile_no_truncate", "TRUNCATE", "audit_tile_reject_change"),
    ],
)

SQLITE_TILES_CREATE, SQLITE_TILES_DROP = _sqlite(
    {
        "audit_tile_grow": f"""CREATE TRIGGER IF NOT EXISTS audit_tile_grow BEFORE UPDATE ON {TILES}
        BEGIN
          SELECT RAISE(ABORT, 'audit Merkle tiles may only grow')
            WHERE NEW.level IS NOT OLD.level OR NEW."index" IS NOT OLD."index"
               OR length(NEW.hashes) < length(OLD.hashes)
               OR substr(NEW.hashes, 1, length(OLD.hashes)) IS NOT OLD.hashes;
        END""",
        "audit_tile_no_delete": _sqlite_refusal(
            TILES, "audit_tile_no_delete", "DELETE", "audit Merkle tiles only grow"
        ),
    }
)


def tile_statements(vendor: str, *, create: bool) -> list[str]:
    """The Merkle tiles' trigger DDL for a database vendor (`postgresql` or `sqlite`)."""
    statements(vendor, create=create)  # refuses any other vendor, with the reason
    if vendor == "postgresql":
        return POSTGRESQL_TILES_CREATE if create else POSTGRESQL_TILES_DROP
    return SQLITE_TILES_CREATE if create else SQLITE_TILES_DROP


# --- witness cosignatures -----------------------------------------------------

_COSIGNED = "audit cosignatures are append-only"

POSTGRESQL_COSIGNATURES_CREATE, POSTGRESQL_COSIGNATURES_DROP = _postgresql(
    COSIGNATURES,
    {
        "audit_cosignature_reject_change": _pg_refusal(
            COSIGNATURES, "audit_cosignature_reject_change", _COSIGNED
        )
    },
    [
        ("audit_cosignature_no_change", "UPDATE OR DELETE", "audit_cosignature_reject_change"),
        ("audit_cosignature_no_truncate", "TRUNCATE", "audit_cosignature_reject_change"),
    ],
)

SQLITE_COSIGNATURES_CREATE, SQLITE_COSIGNATURES_DROP = _sqlite(
    {
        name: _sqlite_refusal(COSIGNATURES, name, event, _COSIGNED)
        for name, event in [
            ("audit_cosignature_no_update", "UPDATE"),
            ("audit_cosignature_no_delete", "DELETE"),
        ]
    }
)


def cosignature_statements(vendor: str, *, create: bool) -> list[str]:
    """The witness cosignatures' trigger DDL for a database vendor (`postgresql` or `sqlite`)."""
    statements(vendor, create=create)  # refuses any other vendor, with the reason
    if vendor == "postgresql":
        return POSTGRESQL_COSIGNATURES_CREATE if create else POSTGRESQL_COSIGNATURES_DROP
    return SQLITE_COSIGNATURES_CREATE if create else SQLITE_COSIGNATURES_DROP
