"""Witnesses of the audit transparency log and their cosignatures.

The witness itself has no Django and is re-exported here from `protocol` (`from audit import
witness`, then `witness.witness_step(...)`); `selectors` reads the configured witnesses and what
each last cosigned. The intake that stores a cosignature is `audit.services.witnessing`. This
package's own import loads nothing but `protocol`.
"""

from audit.witness.protocol import (
    HttpLog,
    LogUnavailable,
    TreeTiles,
    WitnessRefused,
    WitnessState,
    cosigned_note,
    load_state,
    now,
    save_state,
    tree_tiles,
    witness_step,
    witness_verifier_key,
)

__all__ = [
    "HttpLog",
    "LogUnavailable",
    "TreeTiles",
    "WitnessRefused",
    "WitnessState",
    "cosigned_note",
    "load_state",
    "now",
    "save_state",
    "tree_tiles",
    "witness_step",
    "witness_verifier_key",
]
