"""Signed checkpoints in the C2SP signed-note / tlog-checkpoint text format, without Django.

A checkpoint note (https://c2sp.org/tlog-checkpoint, https://c2sp.org/signed-note):

    <origin>\\n
    <size, decimal>\\n
    <Merkle tree root (RFC 6962), 32 bytes, standard base64>\\n
    chain <hash chain head at that size, 32 bytes, standard base64>\\n   (extension line)
    time <RFC 3339 UTC>\\n          (extension line)
    \\n
    \\u2014 <key name> <base64(key hash[4] || Ed25519 signature[64])>\\n

Checkpoints signed before the tree existed carry no `chain` line: their root line is the
hash chain head. Either way `Checkpoint.head_hash` is the chain head and `root_hash` the tree
root ("" for the old form). The signature covers the note text (every line above the blank line, each ending
in \\n). The key hash is the first 4 bytes of SHA-256(key name || 0x0A || 0x01 ||
public key[32]), 0x01 being the Ed25519 signature type. Public keys are shared as
verifier keys: `<key name>+<key hash, 8 hex>+<base64(0x01 || public key)>`.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from audit.tree.tlog_verify import (  # the verifying half lives in the standalone verifier
    ALG_ED25519,
    SIG_PREFIX,
    NoteError,
    key_hash,
    parse_checkpoint,
    parse_verifier_key,
    split_note,
    verify_note_signature,
)
from audit.tree.tlog_verify import raw_public as public_raw

__all__ = ["NoteError", "key_hash", "parse_verifier_key", "public_raw", "split_note"]  # re-exported


@dataclass(frozen=True)
class Checkpoint:
    """The signed statement: the chain of `origin` had `size` entries ending in `head_hash` at `time`."""

    origin: str
    size: int
    head_hash: str  # the hash chain's head, 64 lowercase hex digits
    time: str  # RFC 3339 UTC
    root_hash: str = ""  # the Merkle tree root, 64 lowercase hex digits ("" before the tree)

    def body(self) -> str:
        """The note text that is signed."""
        head = _b64hex(self.head_hash)
        if not self.root_hash:
            return f"{self.origin}\n{self.size}\n{head}\ntime {self.time}\n"
        root = _b64hex(self.root_hash)
        return f"{self.origin}\n{self.size}\n{root}\nchain {head}\ntime {self.time}\n"


def _b64hex(digest_hex: str) -> str:
    return base64.b64encode(bytes.fromhex(digest_hex)).decode("ascii")


def verifier_key(name: str, key: Ed25519PublicKey) -> str:
    """The signed-note verifier key line `<name>+<hash hex>+<base64(0x01||key)>`."""
    raw = public_raw(key)
    encoded = base64.b64encode(bytes([ALG_ED25519]) + raw).decode("ascii")
    return f"{name}+{key_hash(name, raw).hex()}+{encoded}"


def sign(checkpoint: Checkpoint, name: str, private_key: Ed25519PrivateKey) -> str:
    """The complete signed note for `checkpoint`."""
    body = checkpoint.body()
    signature = private_key.sign(body.encode("utf-8"))
    kid = key_hash(name, public_raw(private_key.public_key()))
    return f"{body}\n{SIG_PREFIX}{name} {base64.b64encode(kid + signature).decode('ascii')}\n"


def parse(note: str) -> tuple[Checkpoint, list[tuple[str, bytes]]]:
    """Split a signed note into its checkpoint and its (key name, key hash + signature) lines."""
    text, signatures = split_note(note)
    top = parse_checkpoint(text)
    lines = text[:-1].split("\n")
    time, chain_head = "", b""
    for extra in lines[3:]:
        if extra.startswith("time "):
            time = extra[5:]
        elif extra.startswith("chain "):
            try:
                chain_head = base64.b64decode(extra[6:], validate=True)
            except ValueError as exc:
                raise NoteError("checkpoint chain line is not base64") from exc
            if len(chain_head) != 32:
                raise NoteError("checkpoint chain hash is not 32 bytes")
    if chain_head:
        return Checkpoint(top.origin, top.size, chain_head.hex(), time, top.root.hex()), signatures
    return Checkpoint(top.origin, top.size, top.root.hex(), time), signatures


def verify(note: str, name: str, public_key: Ed25519PublicKey) -> Checkpoint:
    """Return the checkpoint if `note` carries a valid signature by (name, key); else NoteError."""
    verify_note_signature(note, name, public_key)
    return parse(note)[0]


def load_or_create_private_key(path: Path, *, create: bool) -> Ed25519PrivateKey:
    """Load an Ed25519 PEM private key; with `create`, generate it (mode 0600) when missing."""
    if not path.exists():
        if not create:
            raise NoteError(
                f"signing key {path} does not exist; create it with `manage.py audit_keygen`"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        return key
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise NoteError(f"signing key {path} is not an Ed25519 key")
    return key


def time_text(moment: datetime) -> str:
    """RFC 3339 UTC seconds for the checkpoint's time line."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
