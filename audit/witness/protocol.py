"""A witness of the audit transparency log, without Django (C2SP tlog-witness, tlog-cosignature).

A witness holds the last checkpoint it cosigned (its state) and, for each new signed checkpoint
of the log (https://c2sp.org/tlog-witness, pulled here instead of pushed):

1. verifies the log's signature with the log's verifier key alone;
2. refuses another origin, a smaller tree (a rollback: entries from the old size on would be
   gone) and a tree of the same size with another root (a fork);
3. computes, from the log's tiles (C2SP tlog-tiles), an RFC 9162 consistency proof from the
   size it saw to the new size, and verifies it against the root it kept and the new signed root;
4. only then cosigns (C2SP tlog-cosignature/v1) and keeps the new checkpoint.

The witness computes the proof itself: a log that serves tiles of another tree than the one it
signed cannot make the proof verify, so a fork is refused whatever the log sends. Nothing here
imports Django; `HttpLog` speaks to a log over HTTP with the standard library.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from audit.tree import merkle
from audit.tree.tlog_verify import (
    ALG_COSIGNATURE,
    NoteError,
    ProofError,
    cosign,
    key_hash,
    parse_checkpoint,
    parse_verifier_key,
    raw_public,
    split_note,
    verify_consistency,
    verify_note_signature,
)

# A witness's HashSource for the log's tree at a size: complete-subtree hashes from its tiles.
TreeTiles = Callable[[int], merkle.HashSource]


class WitnessRefused(ValueError):
    """A checkpoint the witness will not cosign; `kind` says why, `index` the entry it concerns."""

    def __init__(self, kind: str, reason: str, index: int | None = None) -> None:
        super().__init__(reason)
        self.kind = kind  # signature | origin | rollback | fork
        self.index = index


class LogUnavailable(OSError):
    """The log could not be read (network, HTTP status): nothing was decided."""


@dataclass(frozen=True)
class WitnessState:
    """The last checkpoint a witness cosigned: its origin, tree size and root, and the note."""

    origin: str
    size: int
    root: bytes
    note: str

    def to_json(self) -> str:
        root = base64.b64encode(self.root).decode("ascii")
        doc = {"origin": self.origin, "size": self.size, "root": root, "note": self.note}
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> WitnessState:
        doc = json.loads(text)
        return cls(doc["origin"], int(doc["size"]), base64.b64decode(doc["root"]), doc["note"])


def load_state(path: Path) -> WitnessState | None:
    """The state kept at `path`; None before the witness saw its first checkpoint."""
    if not path.exists():
        return None
    return WitnessState.from_json(path.read_text(encoding="utf-8"))


def save_state(path: Path, state: WitnessState) -> None:
    """Replace the state at `path` atomically (a crash leaves the old state or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".new")
    partial.write_text(state.to_json(), encoding="utf-8")
    os.replace(partial, path)


def witness_step(
    *, state: WitnessState | None, note: str, log_key: str, tiles: TreeTiles
) -> WitnessState:
    """The state after checking `note` against `state`; WitnessRefused when it must not be cosigned.

    With no state (the first checkpoint this witness sees) a checkpoint the log's key signed
    is trusted on first use, as a C2SP witness starts from size 0.
    """
    try:
        name, key = parse_verifier_key(log_key)
        head = parse_checkpoint(verify_note_signature(note, name, key))
    except NoteError as exc:
        raise WitnessRefused(
            "signature", f"the checkpoint does not verify with the log's key: {exc}"
        ) from exc
    new = WitnessState(head.origin, head.size, head.root, note)
    if state is None or state.size == 0:
        return new
    if head.origin != state.origin:
        raise WitnessRefused(
            "origin",
            f"the checkpoint is of log {head.origin!r}, this witness follows {state.origin!r}",
        )
    if head.size < state.size:
        raise WitnessRefused(
            "rollback",
            f"refusing size {head.size}: this witness cosigned size {state.size} of {state.origin}; "
            f"a smaller tree is a rollback (entries from index {head.size} on would be gone)",
            head.size,
        )
    if head.size == state.size:
        if head.root != state.root:
            raise WitnessRefused(
                "fork",
                f"refusing a fork: the log signed two different trees of size {head.size} "
                f"(entries among index 0..{head.size - 1} differ)",
                head.size - 1,
            )
        return new
    try:
        proof = merkle.consistency_proof(tiles(head.size), state.size, head.size)
        verify_consistency(state.size, head.size, state.root, head.root, proof)
    except ProofError as exc:
        raise WitnessRefused(
            "fork",
            f"refusing size {head.size}: it is not proved to extend the tree of size {state.size} "
            f"this witness cosigned (entries among index 0..{state.size - 1} differ, or the log's "
            f"tiles are not its signed tree): {exc}",
            state.size - 1,
        ) from exc
    return new


def cosigned_note(state: WitnessState, name: str, key: Ed25519PrivateKey, timestamp: int) -> str:
    """The checkpoint's text with this witness's cosignature line alone: what it posts to the log."""
    body, _ = split_note(state.note)
    return f"{body}\n{cosign(body, name, key, timestamp)}"


def witness_verifier_key(name: str, key: Ed25519PublicKey) -> str:
    """The witness's verifier key line `<name>+<hash hex>+<base64(0x04 || key)>` (tlog-cosignature)."""
    raw = raw_public(key)
    encoded = base64.b64encode(bytes([ALG_COSIGNATURE]) + raw).decode("ascii")
    return f"{name}+{key_hash(name, raw, ALG_COSIGNATURE).hex()}+{encoded}"


def tree_tiles(fetch: Callable[[int, int, int], bytes]) -> TreeTiles:
    """Tiles of the tree at a size, `fetch(level, index, width)` reading one (width 256: full)."""

    def at(size: int) -> merkle.HashSource:
        def load(level: int, index: int) -> bytes:
            full, partial = merkle.tile_counts(size, level)
            width = merkle.TILE_WIDTH if index < full else partial
            if index > full or width == 0:
                raise ProofError(f"tile {level}/{index} is not in a tree of size {size}")
            hashes = fetch(level, index, width)
            if len(hashes) != width * merkle.HASH_SIZE:
                raise ProofError(
                    f"the log's tile {level}/{index} holds {len(hashes)} bytes, not {width} hashes"
                )
            return hashes

        return merkle.tile_source(load)

    return at


class HttpLog:
    """The log over HTTP: `<url>/audit/tlog/checkpoint`, its tiles, and the cosignature intake."""

    def __init__(self, url: str, *, token: str = "", timeout: float = 10.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the log URL {url!r} is not http(s)")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _call(self, path: str, body: bytes | None = None) -> bytes:
        request = urllib.request.Request(self.url + path, data=body)  # noqa: S310 - http(s) only
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        if body is not None:
            request.add_header("Content-Type", "text/plain; charset=utf-8")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                return response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode("utf-8", "replace")
            raise LogUnavailable(f"{path}: HTTP {exc.code} {detail}") from exc
        except (urllib.error.URLError, TimeoutError) as exc:
            raise LogUnavailable(f"{path}: {exc}") from exc

    def checkpoint(self) -> str:
        """The log's latest checkpoint note; LogUnavailable when it is not UTF-8 text."""
        try:
            return self._call("/audit/tlog/checkpoint").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LogUnavailable(
                f"/audit/tlog/checkpoint: the note is not UTF-8 text ({exc})"
            ) from exc

    def tile(self, level: int, index: int, width: int) -> bytes:
        return self._call(f"/audit/tlog/tile/{level}/{merkle.tile_index_path(index, width)}")

    def submit(self, note: str) -> dict:
        """Post a cosigned note; the log's JSON answer (LogUnavailable when it is not JSON)."""
        answer = self._call("/audit/tlog/cosignature", note.encode("utf-8"))
        try:
            return json.loads(answer)
        except ValueError as exc:  # UnicodeDecodeError included
            raise LogUnavailable(
                f"/audit/tlog/cosignature: the answer is not JSON ({exc})"
            ) from exc


def now() -> int:
    """The cosignature's time: seconds since the epoch."""
    return int(time.time())
