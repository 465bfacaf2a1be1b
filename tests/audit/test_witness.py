"""The witness alone (audit/witness/protocol.py, no database): it cosigns only a tree proved to extend the
last one it cosigned, and refuses rollbacks, forks, other origins and bad signatures by name."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from audit import witness
from audit.chain import notes
from audit.tree import merkle, tlog_verify

ORIGIN = "kiln.test/audit"
LOG_KEY = Ed25519PrivateKey.generate()
LOG_VKEY = notes.verifier_key(ORIGIN, LOG_KEY.public_key())
WITNESS_KEY = Ed25519PrivateKey.generate()


def leaves(n: int, fork_at: int | None = None) -> list[bytes]:
    """n leaf hashes; with `fork_at`, leaf `fork_at` replaced (a log that rewrote history)."""
    out = [merkle.leaf_hash(f"entry {i}".encode()) for i in range(n)]
    if fork_at is not None:
        out[fork_at] = merkle.leaf_hash(b"rewritten")
    return out


class Log:
    """A log in memory: its tiles (as a C2SP log serves them) and a checkpoint signed by `key`."""

    def __init__(self, hashes: list[bytes], key: Ed25519PrivateKey = LOG_KEY, origin: str = ORIGIN):
        self.size = len(hashes)
        self.tiles = merkle.extend_tiles(0, {}, hashes)
        root = merkle.root(merkle.memory_source(hashes), self.size)
        statement = notes.Checkpoint(
            origin, self.size, "ab" * 32, "2026-12-01T00:00:00Z", root.hex()
        )
        self.note = notes.sign(statement, origin, key)
        self.fetched: list[tuple[int, int, int]] = []

    def tile(self, level: int, index: int, width: int) -> bytes:
        self.fetched.append((level, index, width))
        return self.tiles.get((level, index), b"")[: width * merkle.HASH_SIZE]


def seen(log: Log) -> witness.WitnessState:
    """The state of a witness that cosigned `log`'s checkpoint."""
    return witness.witness_step(
        state=None, note=log.note, log_key=LOG_VKEY, tiles=witness.tree_tiles(log.tile)
    )


def step(state: witness.WitnessState | None, log: Log) -> witness.WitnessState:
    return witness.witness_step(
        state=state, note=log.note, log_key=LOG_VKEY, tiles=witness.tree_tiles(log.tile)
    )


def test_the_first_checkpoint_is_trusted_and_a_grown_tree_is_proved_from_the_tiles_then_cosigned():
    old, new = Log(leaves(300)), Log(leaves(1000))
    state = step(seen(old), new)
    assert (state.size, state.note) == (1000, new.note)
    assert new.fetched  # the proof was computed from the tiles the log served
    line_note = witness.cosigned_note(state, "w1", WITNESS_KEY, 1764547200)
    assert tlog_verify.verify_cosignature(line_note, "w1", WITNESS_KEY.public_key()) == 1764547200
    vkey = witness.witness_verifier_key("w1", WITNESS_KEY.public_key())
    assert tlog_verify.parse_verifier_key(vkey, tlog_verify.ALG_COSIGNATURE)[0] == "w1"
    both = new.note + line_note.split("\n\n")[1]  # the log's signature, then the witness's
    assert tlog_verify.verify_checkpoint(both, LOG_VKEY, [vkey], quorum=1).witnesses == ("w1",)


def test_the_same_checkpoint_again_is_accepted_unchanged():
    log = Log(leaves(9))
    assert step(seen(log), log) == seen(log)


@pytest.mark.parametrize(
    ("old", "new", "fork_at", "kind", "says"),
    [
        (600, 300, None, "rollback", "refusing size 300: this witness cosigned size 600"),
        (600, 600, 17, "fork", "two different trees of size 600"),
        (600, 900, 17, "fork", "not proved to extend the tree of size 600"),
        (600, 900, 599, "fork", "entries among index 0..599 differ"),
        (256, 257, 0, "fork", "not proved to extend the tree of size 256"),
    ],
    ids=["truncated-tail", "fork-same-size", "fork-grown", "fork-last-leaf", "fork-one-tile"],
)
def test_a_rollback_or_a_fork_is_refused_naming_it(old, new, fork_at, kind, says):
    state = seen(Log(leaves(old)))
    with pytest.raises(witness.WitnessRefused, match=says) as refused:
        step(state, Log(leaves(new, fork_at)))
    assert refused.value.kind == kind
    assert refused.value.index == (new if kind == "rollback" else min(old, new) - 1)


def test_a_log_serving_tampered_tiles_for_its_signed_tree_is_refused():
    state = seen(Log(leaves(300)))
    honest = Log(leaves(1000))
    tile = bytearray(honest.tiles[(1, 0)])
    tile[0] ^= 1  # the served hash of leaves 0..255 is not the one of the tree the log signed
    honest.tiles[(1, 0)] = bytes(tile)
    with pytest.raises(witness.WitnessRefused, match="not proved to extend") as refused:
        step(state, honest)
    assert refused.value.kind == "fork"


def test_a_truncated_tile_is_refused_naming_it():
    state = seen(Log(leaves(300)))
    short = Log(leaves(1000))
    short.tiles[(1, 0)] = short.tiles[(1, 0)][:-32]  # 2 of the 3 hashes a tree of 1000 has there
    with pytest.raises(witness.WitnessRefused, match=r"tile 1/0 holds 64 bytes, not 3 hashes"):
        step(state, short)


def test_a_checkpoint_signed_by_another_key_or_altered_or_of_another_log_is_refused():
    state = seen(Log(leaves(10)))
    with pytest.raises(witness.WitnessRefused, match="does not verify with the log's key") as err:
        step(state, Log(leaves(20), key=Ed25519PrivateKey.generate()))
    assert err.value.kind == "signature"
    altered = Log(leaves(20))
    altered.note = altered.note.replace("\n20\n", "\n21\n", 1)
    with pytest.raises(witness.WitnessRefused, match="signature does not verify"):
        step(state, altered)
    other = witness.WitnessState("other.example/log", state.size, state.root, state.note)
    with pytest.raises(
        witness.WitnessRefused, match="this witness follows 'other.example/log'"
    ) as err:
        step(other, Log(leaves(20)))
    assert err.value.kind == "origin"


@settings(max_examples=60, deadline=None)
@given(data=st.data(), old=st.integers(1, 700), grow=st.integers(0, 700))
def test_an_honest_log_is_always_cosigned_and_any_rewritten_leaf_never_is(data, old, grow):
    new = old + grow
    state = seen(Log(leaves(old)))
    assert step(state, Log(leaves(new))).size == new
    fork_at = data.draw(st.integers(0, old - 1), label="rewritten leaf")
    with pytest.raises(witness.WitnessRefused):
        step(state, Log(leaves(new, fork_at)))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(2, 600))
def test_a_truncated_or_padded_proof_never_verifies(data, n):
    hashes = leaves(n)
    source = merkle.memory_source(hashes)
    root = merkle.root(source, n)
    index = data.draw(st.integers(0, n - 1), label="index")
    proof = merkle.inclusion_proof(source, index, n)
    cut = data.draw(st.integers(0, len(proof) - 1), label="kept") if proof else 0
    for bad in (proof[:cut], proof + [root]):
        with pytest.raises(tlog_verify.ProofError):
            tlog_verify.verify_inclusion(index, n, hashes[index], bad, root)
    old = data.draw(st.integers(1, n - 1), label="old size")
    consistency = merkle.consistency_proof(source, old, n)
    for bad in (consistency[:-1], consistency + [root]):
        with pytest.raises(tlog_verify.ProofError):
            tlog_verify.verify_consistency(old, n, merkle.root(source, old), root, bad)


def test_the_state_survives_a_restart_and_is_replaced_whole(tmp_path):
    path = tmp_path / "w" / "state.json"
    assert witness.load_state(path) is None
    state = seen(Log(leaves(12)))
    witness.save_state(path, state)
    assert witness.load_state(path) == state
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]


def test_the_log_url_must_be_http():
    with pytest.raises(ValueError, match="is not http"):
        witness.HttpLog("file:///etc/passwd")


def test_the_cosignature_time_is_now():
    assert abs(witness.now() - datetime.now(UTC).timestamp()) < 5
