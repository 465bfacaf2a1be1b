"""The audit hash chain, and the path an event takes to it.

The chain's math has no Django and is re-exported here from `hashing` (`from audit import
chain`, then `chain.entry_bytes(...)`): the canonical entry, its hash and the verification of
rows. The modules beside it: signed checkpoint notes (`notes`, no Django), their external
anchors (`anchors`), the relay's wake-up (`relay`), the audit topic (`topic`), the single writer
(`writer`) and how it and the relay run inside other processes (`runtime`, `metrics`), the
names of events that changed (`renamed`), and the stored chain's verification
(`verification`). This package's own import loads nothing but `hashing`.
"""

from audit.chain.hashing import (
    GENESIS_HASH,
    KEYS,
    ROW_COLUMNS,
    TRACE_ID,
    CanonicalError,
    Entry,
    Problem,
    VerifyState,
    build_entries,
    canonical_data,
    check_checkpoint_sizes,
    entry_bytes,
    entry_hash,
    format_time,
    now_utc,
    verify_rows,
)

__all__ = [
    "GENESIS_HASH",
    "KEYS",
    "ROW_COLUMNS",
    "TRACE_ID",
    "CanonicalError",
    "Entry",
    "Problem",
    "VerifyState",
    "build_entries",
    "canonical_data",
    "check_checkpoint_sizes",
    "entry_bytes",
    "entry_hash",
    "format_time",
    "now_utc",
    "verify_rows",
]
