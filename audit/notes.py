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
import hashlib
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALG_ED25519 = 0x01
SIG_PREFIX = "\u2014 "


class NoteError(ValueError):
    """A note or key that does not parse, or a signature that does not verify."""


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


def key_hash(name: str, public_raw: bytes) -> bytes:
    """The 4-byte key id of an Ed25519 verifier key (signed-note)."""
    return hashlib.sha256(
        name.encode("utf-8") + b"\n" + bytes([ALG_ED25519]) + public_raw
    ).digest()[:4]


def public_raw(key: Ed25519PublicKey) -> bytes:
    """The 32 raw bytes of an Ed25519 public key."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def verifier_key(name: str, key: Ed25519PublicKey) -> str:
    """The signed-note verifier key line `<name>+<hash hex>+<base64(0x01||key)>`."""
    raw = public_raw(key)
    encoded = base64.b64encode(bytes([ALG_ED25519]) + raw).decode("ascii")
    return f"{name}+{key_hash(name, raw).hex()}+{encoded}"


def parse_verifier_key(text: str) -> tuple[str, Ed25519PublicKey]:
    """Read a verifier key line, or a PEM public key (named `kiln`), into (name, key)."""
    text = text.strip()
    if text.startswith("-----BEGIN"):
        key = serialization.load_pem_public_key(text.encode("ascii"))
        if not isinstance(key, Ed25519PublicKey):
            raise NoteError("the PEM public key is not Ed25519")
        return "kiln", key
    try:
        name, hash_hex, encoded = text.split("+", 2)  # names never contain "+"
        blob = base64.b64decode(encoded, validate=True)
    except ValueError as exc:
        raise NoteError("not a verifier key (<name>+<hash>+<key>)") from exc
    if len(blob) != 33 or blob[0] != ALG_ED25519:
        raise NoteError("verifier key is not an Ed25519 key")
    if key_hash(name, blob[1:]).hex() != hash_hex:
        raise NoteError("verifier key hash does not match its name and key")
    return name, Ed25519PublicKey.from_public_bytes(blob[1:])


def sign(checkpoint: Checkpoint, name: str, private_key: Ed25519PrivateKey) -> str:
    """The complete signed note for `checkpoint`."""
    body = checkpoint.body()
    signature = private_key.sign(body.encode("utf-8"))
    kid = key_hash(name, public_raw(private_key.public_key()))
    return f"{body}\n{SIG_PREFIX}{name} {base64.b64encode(kid + signature).decode('ascii')}\n"


def parse(note: str) -> tuple[Checkpoint, list[tuple[str, bytes]]]:
    """Split a signed note into its checkpoint and its (key name, key hash + signature) lines."""
    body, sep, sigs = note.partition("\n\n")
    if not sep:
        raise NoteError("note has no signature block")
    lines = body.split("\n")
    if len(lines) < 3:
        raise NoteError("checkpoint needs origin, size and hash lines")
    origin, size_text, root = lines[0], lines[1], lines[2]
    if not size_text.isdigit() or (size_text != "0" and size_text.startswith("0")):
        raise NoteError(f"checkpoint size {size_text!r} is not a decimal number")
    try:
        head = base64.b64decode(root, validate=True)
    except ValueError as exc:
        raise NoteError("checkpoint hash is not base64") from exc
    if len(head) != 32:
        raise NoteError("checkpoint hash is not 32 bytes")
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
    signatures: list[tuple[str, bytes]] = []
    for line in sigs.split("\n"):
        if not line:
            continue
        if not line.startswith(SIG_PREFIX):
            raise NoteError("malformed signature line")
        name, _, encoded = line[len(SIG_PREFIX) :].rpartition(" ")
        try:
            signatures.append((name, base64.b64decode(encoded, validate=True)))
        except ValueError as exc:
            raise NoteError("signature is not base64") from exc
    if chain_head:
        return Checkpoint(origin, int(size_text), chain_head.hex(), time, head.hex()), signatures
    return Checkpoint(origin, int(size_text), head.hex(), time), signatures


def verify(note: str, name: str, public_key: Ed25519PublicKey) -> Checkpoint:
    """Return the checkpoint if `note` carries a valid signature by (name, key); else NoteError."""
    checkpoint, signatures = parse(note)
    body = note.partition("\n\n")[0] + "\n"
    kid = key_hash(name, public_raw(public_key))
    for sig_name, blob in signatures:
        if sig_name == name and blob[:4] == kid:
            try:
                public_key.verify(blob[4:], body.encode("utf-8"))
            except InvalidSignature as exc:
                raise NoteError("checkpoint signature does not verify") from exc
            return checkpoint
    raise NoteError(f"checkpoint has no signature by key {name!r}")


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
