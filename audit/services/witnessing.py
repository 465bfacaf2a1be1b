"""Witness cosignatures: a checkpoint's cosignature by a configured witness, verified, stored, audited."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.models import Checkpoint, Cosignature
from audit.services.recording import record
from audit.tree.tlog_verify import (
    ALG_COSIGNATURE,
    SIG_PREFIX,
    NoteError,
    key_hash,
    parse_checkpoint,
    raw_public,
    split_note,
    verify_cosignature,
)
from audit.witness.selectors import witness_keys
from kiln.errors import Forbidden, InvalidInput, NotFound
from kiln.identity.permissions import Actor, can_store_cosignature, system_actor

MAX_NOTE_BYTES = 16 * 1024  # a checkpoint with a few dozen signature lines is about 4 KiB


@dataclass(frozen=True)
class CosignResult:
    """What a posted note did: the checkpoint it cosigns, the witnesses stored now and before."""

    size: int
    stored: list[str]
    already: list[str]


def cosignature_add(*, note: str, actor: Actor | None = None) -> CosignResult:
    """Store the cosignatures of configured witnesses on a checkpoint this log signed, audited.

    `note` is the checkpoint's text followed by witness cosignature lines (C2SP
    tlog-cosignature/v1). Refused, with nothing stored: a note that does not parse (400), a
    checkpoint text this log never signed (404), a note without a cosignature by a configured
    witness, or with one that does not verify (403). A cosignature already stored is kept as it
    was (a witness re-cosigning the same checkpoint changes nothing). The witness intake
    (`audit.cosign`, the default actor) only.
    """
    actor = actor or system_actor("witness-intake")
    if not can_store_cosignature(actor):
        raise Forbidden(f"{actor} may not store witness cosignatures")
    if len(note.encode("utf-8")) > MAX_NOTE_BYTES:
        raise InvalidInput(f"the note is longer than {MAX_NOTE_BYTES} bytes")
    try:
        body, signatures = split_note(note)
        head = parse_checkpoint(body)
    except NoteError as exc:
        raise InvalidInput(f"not a signed checkpoint note: {exc}") from exc
    checkpoint = _signed_checkpoint(head.size, body)
    keys = witness_keys()
    named = [(name, blob) for name, blob in signatures if name in keys]
    if not named:
        known = ", ".join(sorted(keys)) or "none configured (KILN_AUDIT_WITNESSES)"
        raise Forbidden(f"the note carries no cosignature by a witness this log knows ({known})")
    valid: dict[str, tuple[int, str]] = {}
    for name, blob in named:
        if blob[:4].hex() != key_id(name, keys[name]):
            raise Forbidden(
                f"witness {name!r}: the cosignature is not by its configured key "
                f"(key id {blob[:4].hex()}, configured {key_id(name, keys[name])}); nothing was stored"
            )
        line = f"{SIG_PREFIX}{name} {base64.b64encode(blob).decode('ascii')}\n"
        try:  # the line alone under the text: what is stored is exactly what verified
            valid.setdefault(name, (verify_cosignature(f"{body}\n{line}", name, keys[name]), line))
        except NoteError as exc:
            raise Forbidden(f"witness {name!r}: {exc}; nothing was stored") from exc
    stored, already = [], []
    with transaction.atomic():
        for name, (timestamp, line) in valid.items():
            if _store(checkpoint, name, key_id(name, keys[name]), timestamp, line):
                stored.append(name)
                record(actor, "audit.checkpoint.cosigned", checkpoint,
                       {"witness": name, "size": checkpoint.size, "timestamp": timestamp})  # fmt: skip
            else:
                already.append(name)
    return CosignResult(checkpoint.size, stored, already)


def _signed_checkpoint(size: int, body: str) -> Checkpoint:
    """The stored checkpoint with a tree root whose signed text is `body`; NotFound otherwise."""
    for checkpoint in Checkpoint.objects.filter(size=size).exclude(root_hash="").order_by("id"):
        if split_note(checkpoint.note)[0] == body:
            return checkpoint
    raise NotFound(f"this log signed no checkpoint of size {size} with that text")


def _store(checkpoint: Checkpoint, witness: str, kid: str, timestamp: int, line: str) -> bool:
    """Insert one cosignature; False when the witness's cosignature of it is already stored."""
    if Cosignature.objects.filter(checkpoint=checkpoint, witness=witness).exists():
        return False
    try:
        with transaction.atomic():
            Cosignature.objects.create(
                checkpoint=checkpoint,
                witness=witness,
                key_id=kid,
                timestamp=timestamp,
                line=line,
                received_at=timezone.now(),
            )
    except IntegrityError:  # the same witness's post, committed a moment ago
        return False
    return True


def key_id(name: str, key: Ed25519PublicKey) -> str:
    """The hex key id of a witness's cosignature key (tlog-cosignature/v1)."""
    return key_hash(name, raw_public(key), ALG_COSIGNATURE).hex()
