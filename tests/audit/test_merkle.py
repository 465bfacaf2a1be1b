"""audit/tree/merkle.py: RFC 6962 hashing and proofs against published vectors, tiles, and properties."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.tree import merkle

VECTORS = json.loads(
    (Path(__file__).parent / "vectors" / "transparency-dev-merkle.json").read_text()
)
# The RFC 6962 test leaves (transparency-dev/merkle testonly.LeafInputs) and the roots of the
# trees of their first n leaves, n = 0..8, as the same repository publishes them.
LEAF_INPUTS = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
)]  # fmt: skip
ROOTS = [bytes.fromhex(h) for h in (
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]  # fmt: skip
LEAVES = [merkle.leaf_hash(x) for x in LEAF_INPUTS]


def _b64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _proof(case: dict) -> list[bytes]:
    return [_b64(p) for p in case.get("proof") or []]


@pytest.mark.parametrize("n", range(9), ids=lambda n: f"size-{n}")
def test_roots_of_the_rfc6962_test_leaves(n):
    assert merkle.root(merkle.memory_source(LEAVES[:n]), n) == ROOTS[n]


@pytest.mark.parametrize("case", VECTORS["inclusion"], ids=lambda c: c["file"][9:-5])
def test_inclusion_verification_matches_the_published_vectors(case):
    def verify():
        merkle.verify_inclusion(
            case["leafIdx"],
            case["treeSize"],
            _b64(case["leafHash"]),
            _proof(case),
            _b64(case["root"]),
        )

    if case["wantErr"]:
        with pytest.raises(merkle.ProofError):
            verify()
    else:
        verify()


@pytest.mark.parametrize("case", VECTORS["consistency"], ids=lambda c: c["file"][9:-5])
def test_consistency_verification_matches_the_published_vectors(case):
    def verify():
        merkle.verify_consistency(
            case["size1"], case["size2"], _b64(case["root1"]), _b64(case["root2"]), _proof(case)
        )

    if case["wantErr"]:
        with pytest.raises(merkle.ProofError):
            verify()
    else:
        verify()


HAPPY_INCLUSION = [
    c for c in VECTORS["inclusion"] if c["desc"] == "happy path" and c["treeSize"] <= 8
]
HAPPY_CONSISTENCY = [c for c in VECTORS["consistency"] if c["desc"] == "happy path" and c["size1"]]


@pytest.mark.parametrize("case", HAPPY_INCLUSION, ids=lambda c: c["file"][9:-5])
def test_inclusion_proofs_are_generated_byte_for_byte(case):
    source = merkle.memory_source(LEAVES[: case["treeSize"]])
    assert merkle.root(source, case["treeSize"]) == _b64(case["root"])
    assert merkle.inclusion_proof(source, case["leafIdx"], case["treeSize"]) == _proof(case)


@pytest.mark.parametrize("case", HAPPY_CONSISTENCY, ids=lambda c: c["file"][11:-5])
def test_consistency_proofs_are_generated_byte_for_byte(case):
    source = merkle.memory_source(LEAVES[: case["size2"]])
    assert merkle.root(source, case["size2"]) == _b64(case["root2"])
    assert merkle.consistency_proof(source, case["size1"], case["size2"]) == _proof(case)


def test_generated_cases_cover_the_vectors():
    assert len(HAPPY_INCLUSION) >= 5 and len(HAPPY_CONSISTENCY) >= 5


@pytest.mark.parametrize(
    ("index", "path"),
    [(0, "000"), (5, "005"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067")],
    ids=str,
)
def test_tile_paths_group_the_index_in_threes(index, path):
    assert merkle.tile_index_path(index) == path
    assert merkle.parse_tile_index(path) == (index, 256)
    assert merkle.parse_tile_index(f"{path}.p/7") == (index, 7)


@pytest.mark.parametrize(
    "text", ["5", "x005", "0005", "x000/005", "005.p/0", "005.p/256", "005.p/", "../001", ""]
)
def test_malformed_tile_paths_are_refused(text):
    with pytest.raises(ValueError):
        merkle.parse_tile_index(text)


def _tiles_by_batches(leaves: list[bytes], batches: list[int]) -> dict[tuple[int, int], bytes]:
    """Grow a tiled tree by appending the leaves in the given batch sizes, as the writer does."""
    tiles: dict[tuple[int, int], bytes] = {}
    size = 0
    for k in [*batches, len(leaves)]:
        k = min(k, len(leaves) - size)
        edge = {}
        for level in range(merkle.tile_levels(size) + 1):
            full, width = merkle.tile_counts(size, level)
            if width:
                edge[level] = tiles[(level, full)]
        for key, content in merkle.extend_tiles(size, edge, leaves[size : size + k]).items():
            old = tiles.get(key, b"")
            assert content.startswith(old)  # a tile only grows
            tiles[key] = content
        size += k
    return tiles


def _leaves(n: int, salt: int = 0) -> list[bytes]:
    return [merkle.leaf_hash(f"{salt}:{i}".encode()) for i in range(n)]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=1400),
    batches=st.lists(st.integers(min_value=1, max_value=600), max_size=6),
    data=st.data(),
)
def test_tiles_grown_in_any_batches_prove_what_the_whole_tree_proves(n, batches, data):
    leaves = _leaves(n)
    tiles = _tiles_by_batches(leaves, batches)
    tiled = merkle.tile_source(lambda level, index: tiles.get((level, index), b""))
    whole = merkle.memory_source(leaves)
    assert merkle.root(tiled, n) == merkle.root(whole, n)
    size = data.draw(st.integers(min_value=1, max_value=n))
    index = data.draw(st.integers(min_value=0, max_value=size - 1))
    proof = merkle.inclusion_proof(tiled, index, size)
    assert proof == merkle.inclusion_proof(whole, index, size)
    assert len(proof) <= (size - 1).bit_length()  # at most ceil(log2 size) hashes
    merkle.verify_inclusion(index, size, leaves[index], proof, merkle.root(whole, size))
    old = data.draw(st.integers(min_value=1, max_value=size))
    consistency = merkle.consistency_proof(tiled, old, size)
    merkle.verify_consistency(
        old, size, merkle.root(whole, old), merkle.root(whole, size), consistency
    )


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=2, max_value=300),
    data=st.data(),
)
def test_a_changed_proof_leaf_or_index_never_verifies(n, data):
    leaves = _leaves(n, salt=1)
    source = merkle.memory_source(leaves)
    index = data.draw(st.integers(min_value=0, max_value=n - 1))
    proof = merkle.inclusion_proof(source, index, n)
    root = merkle.root(source, n)
    other = data.draw(st.integers(min_value=0, max_value=n - 1).filter(lambda i: i != index))
    with pytest.raises(merkle.ProofError):
        merkle.verify_inclusion(other, n, leaves[index], proof, root)
    with pytest.raises(merkle.ProofError):
        merkle.verify_inclusion(index, n, leaves[other], proof, root)
    if proof:
        k = data.draw(st.integers(min_value=0, max_value=len(proof) - 1))
        bit = data.draw(st.integers(min_value=0, max_value=255))
        flipped = bytearray(proof[k])
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(merkle.ProofError):
            merkle.verify_inclusion(
                index, n, leaves[index], [*proof[:k], bytes(flipped), *proof[k + 1 :]], root
            )
        with pytest.raises(merkle.ProofError):
            merkle.verify_inclusion(index, n, leaves[index], proof[:-1], root)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(min_value=2, max_value=300), data=st.data())
def test_a_forked_tree_never_proves_consistent(n, data):
    # Two logs share the first `fork` leaves and then diverge: no proof links them.
    fork = data.draw(st.integers(min_value=0, max_value=n - 1))
    mine = _leaves(n, salt=2)
    theirs = mine[:fork] + _leaves(n - fork, salt=3)
    old = data.draw(st.integers(min_value=fork + 1, max_value=n))
    new = data.draw(st.integers(min_value=old, max_value=n))
    proof = merkle.consistency_proof(merkle.memory_source(mine), old, new)
    old_root = merkle.root(merkle.memory_source(theirs), old)
    with pytest.raises(merkle.ProofError):
        merkle.verify_consistency(
            old, new, old_root, merkle.root(merkle.memory_source(mine), new), proof
        )


def test_extend_tiles_refuses_a_right_edge_that_does_not_fit_the_size():
    with pytest.raises(ValueError, match="must hold 3 hashes"):
        merkle.extend_tiles(3, {0: b"\x00" * 64}, [hashlib.sha256(b"x").digest()])
