"""Audit writes: `record` (every subsystem), the relay, the chain append, checkpoints,
verification runs, roles and exports. Split by concern; everything is importable from here."""

from audit.services.appending import (
    AppendResult,
    chain_append,
    chain_head,
    checkpoint_create,
    public_key_path,
    signing_key,
)
from audit.services.operations import (
    export_create,
    roles_setup,
    verification_request,
    verification_run_store,
)
from audit.services.recording import actor_name, record, target_name
from audit.services.relaying import relay_publish
from audit.services.witnessing import CosignResult, cosignature_add

__all__ = [
    "AppendResult",
    "actor_name",
    "chain_append",
    "chain_head",
    "CosignResult",
    "cosignature_add",
    "checkpoint_create",
    "export_create",
    "public_key_path",
    "record",
    "relay_publish",
    "roles_setup",
    "signing_key",
    "target_name",
    "verification_request",
    "verification_run_store",
]
