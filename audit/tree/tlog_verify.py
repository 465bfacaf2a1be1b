"""Standalone verifier of the audit transparency log: only the standard library and `cryptography`.

One file on purpose (an auditor copies it alone), so it may run a little past ~400 lines.

Copy this one file anywhere and, with the checkpoint verifier key (`/audit/public-key/`), check
offline a per-event proof bundle (`GET /api/v1/audit/events/<seq>/proof`):

    python tlog_verify.py bundle kiln-audit-proof-4.json --public-key kiln-audit.pub \
        [--witness-key W.vkey ... --quorum K]
    python tlog_verify.py consistency OLD.note NEW.note PROOF.json --public-key kiln-audit.pub

It checks: the entry's leaf hash (RFC 9162 SHA-256(0x00 || entry)), the inclusion proof against
the checkpoint's Merkle root, the checkpoint's Ed25519 signed-note signature, the witnesses'
C2SP tlog-cosignature lines and an optional quorum of them; and that a later checkpoint's tree
extends an earlier one's (a consistency proof), so a fork is refused naming both sizes.
Exit 0 when everything verifies, 1 with the reason (naming the entry index) otherwise, 2 for
unreadable input. Kiln's own code (audit.tree.merkle, audit.chain.notes) uses these functions; nothing
here imports Django or Kiln.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import struct
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

HASH_SIZE = 32
ALG_ED25519 = 0x01  # signed-note signature type of an Ed25519 note signature
ALG_COSIGNATURE = 0x04  # C2SP tlog-cosignature/v1 (Ed25519 over the timestamped checkpoint)
SIG_PREFIX = "\u2014 "
COSIGNATURE_HEADER = "cosignature/v1\n"
SIZE_MAX = 2**64 - 1  # a checkpoint's tree size is a u64 (C2SP tlog-checkpoint)
SIZE_DIGITS = len(str(SIZE_MAX))  # 20


class ProofError(ValueError):
    """A proof that does not verify, or a request for one that cannot exist."""


class NoteError(ValueError):
    """A note or key that does not parse, or a signature that does not verify."""


class VerificationError(ValueError):
    """What an offline check found wrong; `index` is the entry index it concerns (or None)."""

    def __init__(self, reason: str, index: int | None = None) -> None:
        super().__init__(reason)
        self.index = index


# --- RFC 9162 hashing and proof verification -------------------------------------------------


def leaf_hash(entry: bytes) -> bytes:
    """RFC 9162 leaf hash: SHA-256(0x00 || entry)."""
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 interior node hash: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], expected_root: bytes
) -> None:
    """RFC 9162 2.1.3.2: raise ProofError unless `proof` puts `leaf` at `index` under the root."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    need_hash(leaf)
    need_hash(expected_root)
    if computed_root(index, size, leaf, proof) != expected_root:
        raise ProofError(
            f"inclusion proof for index {index} does not match the root at size {size}"
        )


def computed_root(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root an inclusion proof leads to (ProofError if it has the wrong length)."""
    r = leaf
    for p, on_left in proof_path(index, size - 1, proof, "inclusion"):
        r = node_hash(p, r) if on_left else node_hash(r, p)
    return r


def proof_path(fn: int, sn: int, proof: Sequence[bytes], kind: str) -> Iterator[tuple[bytes, bool]]:
    """RFC 9162's walk up from node `fn` of a tree whose last node is `sn`: each proof hash with
    whether it is the left sibling (ProofError for a hash that is not one, or a proof longer or
    shorter than the tree is deep)."""
    for p in proof:
        need_hash(p)
        if sn == 0:
            raise ProofError(f"{kind} proof is longer than the tree is deep")
        on_left = bool(fn & 1 or fn == sn)
        yield p, on_left
        if on_left:
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError(f"{kind} proof is shorter than the tree is deep")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 2.1.4.2: raise ProofError unless the tree at new_size extends the one at old_size."""
    if old_size > new_size:
        raise ProofError(f"size {old_size} is larger than size {new_size}")
    if old_size == 0:
        raise ProofError("a consistency proof from the empty tree proves nothing")
    if old_size == new_size:
        if proof:
            raise ProofError("a proof between equal sizes must be empty")
        if old_root != new_root:
            raise ProofError(f"two different roots at size {old_size}: the log forked")
        return
    if not proof:
        raise ProofError("empty consistency proof between different sizes")
    need_hash(old_root)
    need_hash(new_root)
    path = list(proof)
    for p in path:
        need_hash(p)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c, on_left in proof_path(fn, sn, path[1:], "consistency"):
        if on_left:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
        else:
            sr = node_hash(sr, c)
    if fr != old_root:
        raise ProofError(
            f"the tree at size {new_size} does not contain the tree at size {old_size}"
        )
    if sr != new_root:
        raise ProofError(f"consistency proof does not match the root at size {new_size}")


def need_hash(value: bytes) -> None:
    if not isinstance(value, bytes | bytearray) or len(value) != HASH_SIZE:
        raise ProofError("a proof element, leaf or root is not a 32-byte hash")


# --- signed notes and cosignatures (C2SP signed-note, tlog-checkpoint, tlog-cosignature) ------


def key_hash(name: str, public_raw: bytes, alg: int = ALG_ED25519) -> bytes:
    """The 4-byte key id of a verifier key: SHA-256(name || 0x0A || alg || key)[:4]."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([alg]) + public_raw).digest()[:4]


def raw_public(key: Ed25519PublicKey) -> bytes:
    """The 32 raw bytes of an Ed25519 public key."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def parse_verifier_key(text: str, alg: int = ALG_ED25519) -> tuple[str, Ed25519PublicKey]:
    """Read a verifier key line `<name>+<hash hex>+<base64(alg || key)>`, or a PEM public key
    (named `kiln`), into (name, key)."""
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
    if len(blob) != 33 or blob[0] != alg:
        raise NoteError(f"verifier key is not an Ed25519 key of type 0x{alg:02x}")
    if key_hash(name, blob[1:], alg).hex() != hash_hex:
        raise NoteError("verifier key hash does not match its name and key")
    return name, Ed25519PublicKey.from_public_bytes(blob[1:])


def split_note(note: str) -> tuple[str, list[tuple[str, bytes]]]:
    """A signed note's signed text (each line ending in \\n) and its (key name, blob) lines."""
    body, sep, sigs = note.partition("\n\n")
    if not sep:
        raise NoteError("note has no signature block")
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
    return body + "\n", signatures


def verify_note_signature(note: str, name: str, public_key: Ed25519PublicKey) -> str:
    """The signed text of `note` if it carries a valid signature by (name, key); else NoteError."""
    body, signatures = split_note(note)
    kid = key_hash(name, raw_public(public_key))
    for sig_name, blob in signatures:
        if sig_name == name and blob[:4] == kid:
            try:
                public_key.verify(blob[4:], body.encode("utf-8"))
            except InvalidSignature as exc:
                raise NoteError("checkpoint signature does not verify") from exc
            return body
    raise NoteError(f"checkpoint has no signature by key {name!r}")


def cosignature_message(body: str, timestamp: int) -> bytes:
    """What a tlog-cosignature/v1 signs: the header, the time line, then the checkpoint text."""
    return f"{COSIGNATURE_HEADER}time {timestamp}\n{body}".encode()


def cosign(body: str, name: str, private_key: Ed25519PrivateKey, timestamp: int) -> str:
    """A witness's cosignature line for the checkpoint text `body` (key id, u64 time, signature)."""
    kid = key_hash(name, raw_public(private_key.public_key()), ALG_COSIGNATURE)
    blob = (
        kid + struct.pack(">Q", timestamp) + private_key.sign(cosignature_message(body, timestamp))
    )
    return f"{SIG_PREFIX}{name} {base64.b64encode(blob).decode('ascii')}\n"


def verify_cosignature(note: str, name: str, key: Ed25519PublicKey) -> int:
    """The timestamp of the valid cosignature of (name, key) on `note`; NoteError if none."""
    body, signatures = split_note(note)
    kid = key_hash(name, raw_public(key), ALG_COSIGNATURE)
    for sig_name, blob in signatures:
        if sig_name == name and blob[:4] == kid:
            if len(blob) != 4 + 8 + 64:
                raise NoteError(f"cosignature by {name!r} is not 76 bytes")
            (timestamp,) = struct.unpack(">Q", blob[4:12])
            try:
                key.verify(blob[12:], cosignature_message(body, timestamp))
            except InvalidSignature as exc:
                raise NoteError(f"cosignature by {name!r} does not verify") from exc
            return timestamp
    raise NoteError(f"checkpoint has no cosignature by witness {name!r}")


@dataclass(frozen=True)
class CheckpointHead:
    """The first three lines of a checkpoint: origin, tree size and Merkle root."""

    origin: str
    size: int
    root: bytes
    body: str = field(repr=False)
    witnesses: tuple[str, ...] = ()


def parse_checkpoint(body: str) -> CheckpointHead:
    """Origin, size and root of a checkpoint's signed text (C2SP tlog-checkpoint)."""
    lines = body.split("\n")
    if len(lines) < 4:
        raise NoteError("checkpoint needs origin, size and hash lines")
    size_text = lines[1]
    # ASCII digits only (str.isdigit also takes "²", which int() refuses), no leading zero, and
    # at most a u64's 20 digits (int() refuses 4,300 and more; C2SP sizes are u64).
    if (
        not (size_text.isascii() and size_text.isdigit())
        or len(size_text) > SIZE_DIGITS
        or (size_text != "0" and size_text.startswith("0"))
        or int(size_text) > SIZE_MAX
    ):
        shown = repr(size_text) if len(size_text) <= 40 else repr(size_text[:37]) + "..."
        raise NoteError(
            f"checkpoint size {shown} is not an ASCII decimal number of at most "
            f"{SIZE_DIGITS} digits (a u64, no leading zeros)"
        )
    try:
        root = base64.b64decode(lines[2], validate=True)
    except ValueError as exc:
        raise NoteError("checkpoint hash is not base64") from exc
    if len(root) != HASH_SIZE:
        raise NoteError("checkpoint hash is not 32 bytes")
    return CheckpointHead(lines[0], int(size_text), root, body)


def verify_checkpoint(
    note: str, key_text: str, witness_keys: Sequence[str] = (), quorum: int = 0
) -> CheckpointHead:
    """The checkpoint of `note` once its signature and `quorum` witness cosignatures verify."""
    try:
        name, key = parse_verifier_key(key_text)
        head = parse_checkpoint(verify_note_signature(note, name, key))
        cosigned = []
        for text in witness_keys:
            witness, witness_key = parse_verifier_key(text, ALG_COSIGNATURE)
            try:
                verify_cosignature(note, witness, witness_key)
            except NoteError:
                continue  # a missing or bad cosignature only counts against the quorum
            cosigned.append(witness)
    except NoteError as exc:
        raise VerificationError(str(exc)) from exc
    if len(cosigned) < quorum:
        raise VerificationError(
            f"checkpoint at size {head.size} has {len(cosigned)} valid witness cosignatures "
            f"({', '.join(cosigned) or 'none'}), the quorum is {quorum}"
        )
    return CheckpointHead(head.origin, head.size, head.root, head.body, tuple(cosigned))


def _hashes(items: Sequence[str]) -> list[bytes]:
    try:
        return [base64.b64decode(item, validate=True) for item in items]
    except (ValueError, TypeError) as exc:
        raise VerificationError("a proof hash is not base64") from exc


def verify_bundle(
    bundle: dict, key_text: str, witness_keys: Sequence[str] = (), quorum: int = 0
) -> CheckpointHead:
    """Check a per-event proof bundle offline; VerificationError names the entry index."""
    index, text, note = bundle["index"], bundle["entry"], bundle["checkpoint"]
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise VerificationError(f"the bundle's index {str(index)[:40]!r} is not a leaf index")
    if not isinstance(text, str) or not isinstance(note, str):
        raise VerificationError("the bundle's entry or checkpoint is not text", index)
    head = verify_checkpoint(note, key_text, witness_keys, quorum)
    try:
        entry = text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: no canonical entry holds one
        raise VerificationError(f"entry at index {index} is not UTF-8 text", index) from exc
    try:
        seq = json.loads(entry)["seq"]
    except (ValueError, KeyError, TypeError) as exc:
        raise VerificationError(f"entry at index {index} is not a canonical entry", index) from exc
    if seq != index + 1:
        raise VerificationError(f"entry at index {index} says seq {seq}, not {index + 1}", index)
    if index >= head.size:
        raise VerificationError(
            f"entry index {index} is beyond the checkpoint's tree of size {head.size}: "
            "the log was truncated before it", index,
        )  # fmt: skip
    try:
        verify_inclusion(index, head.size, leaf_hash(entry), _hashes(bundle["proof"]), head.root)
    except ProofError as exc:
        raise VerificationError(
            f"entry at index {index} is not the one the checkpoint at size {head.size} signed "
            f"(rewritten entry or bad proof): {exc}", index,
        ) from exc  # fmt: skip
    return head


def verify_checkpoints_consistent(
    old_note: str, new_note: str, proof: Sequence[str], key_text: str
) -> tuple[CheckpointHead, CheckpointHead]:
    """Both checkpoints verify and the newer tree extends the older one; a fork is named."""
    old, new = verify_checkpoint(old_note, key_text), verify_checkpoint(new_note, key_text)
    if old.size > new.size:
        raise VerificationError(
            f"the log was truncated: its checkpoint at size {new.size} is smaller than the one "
            f"signed at size {old.size} (entries from index {new.size} on are gone)",
            new.size,
        )
    if old.size == 0:
        return old, new
    try:
        verify_consistency(old.size, new.size, old.root, new.root, _hashes(proof))
    except ProofError as exc:
        raise VerificationError(
            f"the log forked: the tree at size {new.size} does not extend the signed tree at "
            f"size {old.size} (the first {old.size} entries, index 0..{old.size - 1}, differ): {exc}",
            old.size - 1,
        ) from exc
    return old, new


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tlog_verify.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--public-key", required=True, type=Path, help="checkpoint verifier key")
    parser.add_argument("--witness-key", action="append", default=[], type=Path)
    parser.add_argument("--quorum", type=int, default=0, help="witness cosignatures required")
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("bundle").add_argument("bundle", type=Path)
    cons = sub.add_parser("consistency")
    for name in ("old", "new", "proof"):
        cons.add_argument(name, type=Path)
    args = parser.parse_args(argv)
    try:
        key_text = args.public_key.read_text(encoding="utf-8")
        witnesses = [path.read_text(encoding="utf-8") for path in args.witness_key]
        if args.what == "bundle":
            bundle = json.loads(args.bundle.read_text(encoding="utf-8"))
        else:
            notes_text = args.old.read_text(encoding="utf-8"), args.new.read_text(encoding="utf-8")
            proof = json.loads(args.proof.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, ValueError) as exc:
        print(f"cannot read the input: {exc}", file=sys.stderr)
        return 2
    try:
        if args.what == "bundle":
            head = verify_bundle(bundle, key_text, witnesses, args.quorum)
            print(f"entry {bundle['index']} is in the signed tree of size {head.size}")
        else:
            old, new = verify_checkpoints_consistent(*notes_text, proof["proof"], key_text)
            print(f"the tree at size {new.size} extends the tree at size {old.size}")
    except (VerificationError, KeyError, TypeError) as exc:
        print(f"NOT VERIFIED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
