"""audit_tlog_bench's measurements: the tree while appending, proofs and tiles over HTTP, offline
verification, the tree check, and the faults a witness or the verifier must catch.

Every figure is taken on the configured database through the code the log runs: entries are
appended by `chain_append` (the writer's one write, tree included), served by a real ASGI
server (uvicorn, a subprocess) and verified by `audit/tree/tlog_verify.py`.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import random
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from django.db import transaction

from audit import witness
from audit.chain import notes
from audit.chain.verification import iter_rows
from audit.models import Checkpoint
from audit.services import appending, chain_append, chain_head, checkpoint_create, signing_key
from audit.services.appending import tree_extend
from audit.tree import merkle, tlog_verify
from audit.tree.verification import advance_edge, verify_tree

SEEDS = {"tune": 1000, "report": 20261201}  # constants chosen on "tune", reported on "report"
WARMUP = 200  # untimed requests per kind first: chosen on the tune seed (p99 settled after ~100)


def quantiles_ms(samples: list[float]) -> dict[str, float]:
    """p50, p99 and max of durations in seconds, as milliseconds (p99: the nearest rank)."""
    ordered = sorted(samples)
    at = min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)
    return {"p50_ms": round(ordered[len(ordered) // 2] * 1e3, 3),
            "p99_ms": round(ordered[at] * 1e3, 3), "max_ms": round(ordered[-1] * 1e3, 3),
            "n": len(ordered)}  # fmt: skip


def _messages(start: int, count: int, tag: str) -> list[tuple[str, bytes]]:
    """`count` stream entries as the writer reads them from the topic."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    out = []
    for i in range(start, start + count):
        doc = {"event_id": str(uuid.uuid4()), "recorded_at": now, "actor": "bench",
               "action": "audit.bench.recorded", "target": f"bench:{i}",
               "data": f'{{"i":{i},"run":"{tag}"}}', "trace_id": ""}  # fmt: skip
        out.append((f"{i}-0", json.dumps(doc).encode()))
    return out


def fill(*, entries: int, batch: int, checkpoint_every: int) -> dict:
    """Append until the chain has `entries` entries, `batch` at a time, signing a checkpoint every
    `checkpoint_every`; the append rate with the tree and the tree's share of the append time."""
    tag = uuid.uuid4().hex[:8]
    spent = {"tree": 0.0}

    def timed_tree_extend(**kwargs) -> None:
        began = time.perf_counter()
        try:
            tree_extend(**kwargs)
        finally:
            spent["tree"] += time.perf_counter() - began

    head = chain_head()[0]
    appended, began = 0, time.perf_counter()
    appending.tree_extend = timed_tree_extend  # measured, not changed: restored below
    try:
        while head + appended < entries:
            count = min(batch, entries - head - appended)
            chain_append(messages=_messages(head + appended, count, tag))
            appended += count
            if (head + appended) % checkpoint_every < count:
                checkpoint_create()
    finally:
        appending.tree_extend = tree_extend
    seconds = time.perf_counter() - began
    checkpoint_create()
    return {
        "appended": appended,
        "batch": batch,
        "append_entries_per_s": round(appended / seconds) if appended else None,
        "tree_share_of_append": round(spent["tree"] / seconds, 3) if appended else None,
        "tree_leaves_per_s_in_append": round(appended / spent["tree"]) if spent["tree"] else None,
    }


def pure_tree_rate(leaves: int = 200_000) -> float:
    """Leaves a second `merkle.extend_tiles` adds in memory, 1,000 at a time (no database)."""
    hashes = [merkle.leaf_hash(i.to_bytes(8, "big")) for i in range(leaves)]
    size, edge, began = 0, {}, time.perf_counter()
    for lo in range(0, leaves, 1000):
        changed = merkle.extend_tiles(size, edge, hashes[lo : lo + 1000])
        size += len(hashes[lo : lo + 1000])
        advance_edge(edge, changed)
    return leaves / (time.perf_counter() - began)


class Client:
    """One keep-alive HTTP/1.1 connection to the server under test."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def get(self, path: str) -> tuple[float, int, bytes]:
        """(seconds, status, body); a connection the server closed while idle is opened again
        (uvicorn ends keep-alive after 5 s) and that request is not timed from the first try."""
        for attempt in (1, 2):
            began = time.perf_counter()
            try:
                self.conn.request("GET", path)
                response = self.conn.getresponse()
                body = response.read()
            except (http.client.RemoteDisconnected, ConnectionError) as exc:
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if attempt == 2:
                    raise OSError(f"GET {path}: {exc}") from exc
                continue
            return time.perf_counter() - began, response.status, body
        raise AssertionError("unreachable")


def serve_latency(client: Client, kinds: dict[str, Callable[[random.Random], str]], *,
                  requests: int, seed: int) -> dict:  # fmt: skip
    """Each kind's path, drawn by a seeded generator: WARMUP untimed, then `requests` timed."""
    out = {}
    for name, path_for in kinds.items():
        rng = random.Random(f"{seed}:{name}")
        for _ in range(WARMUP):
            client.get(path_for(rng))
        samples, failures = [], 0
        for _ in range(requests):
            seconds, status, _body = client.get(path_for(rng))
            samples.append(seconds)
            failures += status != 200
        out[name] = {**quantiles_ms(samples), "non_200": failures}
    return out


def proofs_and_bundles(
    client: Client, size: int, *, count: int, seed: int
) -> tuple[dict, list[dict]]:
    """Inclusion proof lengths against ceil(log2 size), and `count` proof bundles fetched."""
    rng = random.Random(f"{seed}:bundles")
    longest, bundles = 0, []
    for _ in range(count):
        seq = rng.randint(1, size)
        _, _, body = client.get(f"/api/v1/audit/proofs/inclusion?seq={seq}&size={size}")
        longest = max(longest, len(json.loads(body)["proof"]))
        _, status, body = client.get(f"/api/v1/audit/events/{seq}/proof")
        if status == 200:
            bundles.append(json.loads(body))
    bound = math.ceil(math.log2(size)) if size > 1 else 0
    return {"tree_size": size, "longest_proof_hashes": longest, "ceil_log2_n": bound,
            "within_bound": longest <= bound}, bundles  # fmt: skip


def offline_verification(bundles: list[dict], key_text: str) -> dict:
    """`tlog_verify.verify_bundle` per bundle (key parse, leaf, proof, Ed25519 signature)."""
    samples = []
    for bundle in bundles:
        began = time.perf_counter()
        tlog_verify.verify_bundle(bundle, key_text)
        samples.append(time.perf_counter() - began)
    return quantiles_ms(samples)


def tree_check() -> dict:
    """audit_verify's tree check over the whole chain: seconds and leaves a second."""
    began = time.perf_counter()
    with transaction.atomic():
        report = verify_tree(iter_rows())
    seconds = time.perf_counter() - began
    return {"ok": report.ok, "leaves": report.size, "tiles": report.tiles,
            "signed_roots": report.roots, "seconds": round(seconds, 2),
            "leaves_per_s": round(report.size / seconds) if seconds else None}  # fmt: skip


def _refusal(call: Callable[[], object], errors: tuple[type[Exception], ...], by: str) -> dict:
    try:
        call()
    except errors as exc:
        return {"caught": True, "by": by, "index_named": getattr(exc, "index", None),
                "message": str(exc)}  # fmt: skip
    return {"caught": False, "by": by, "index_named": None, "message": "accepted"}


def faults(client: Client, bundle: dict, key_text: str, *, fork_at: int) -> dict:
    """A forked log (the log's key signing a tree that differs at leaf `fork_at`), a rewritten
    entry and a truncated tail, each put to the witness or the verifier."""
    latest = Checkpoint.objects.exclude(root_hash="").order_by("-size", "-id").first()
    earlier = (
        Checkpoint.objects.exclude(root_hash="")
        .filter(size__lt=latest.size)
        .order_by("-size")
        .first()
    )
    size = latest.size
    held = witness.WitnessState(notes.parse(latest.note)[0].origin, size,
                                bytes.fromhex(latest.root_hash), latest.note)  # fmt: skip
    served = witness.tree_tiles(lambda lvl, idx, w: client.get(
        f"/audit/tlog/tile/{lvl}/{merkle.tile_index_path(idx, w)}")[2])  # fmt: skip
    # The forked log's tree: the real leaves, leaf `fork_at` replaced, 1,000 more after them.
    tiles_now = served(size)  # one source: each tile fetched once
    leaves = [tiles_now(0, i) for i in range(size)]
    leaves[fork_at] = merkle.leaf_hash(b"rewritten history")
    leaves += [merkle.leaf_hash(f"after {i}".encode()) for i in range(1000)]
    forked_tiles = merkle.extend_tiles(0, {}, leaves)
    forked = witness.tree_tiles(lambda lvl, idx, w: forked_tiles.get((lvl, idx), b"")[: w * 32])
    root = merkle.root(forked(len(leaves)), len(leaves))
    statement = notes.Checkpoint(held.origin, len(leaves), "00" * 32,
                                 notes.time_text(datetime.now(UTC)), root.hex())  # fmt: skip
    forked_note = notes.sign(statement, held.origin, signing_key())
    proof = merkle.consistency_proof(forked(len(leaves)), size, len(leaves))
    b64 = [base64.b64encode(p).decode() for p in proof]
    rewritten = {**bundle, "entry": bundle["entry"].replace('"actor":"', '"actor":"x', 1)}
    refused = (witness.WitnessRefused,)
    return {
        "forked_log_witness": _refusal(lambda: witness.witness_step(
            state=held, note=forked_note, log_key=key_text, tiles=forked), refused, "audit_witness"),
        "forked_log_verifier": _refusal(lambda: tlog_verify.verify_checkpoints_consistent(
            latest.note, forked_note, b64, key_text), (tlog_verify.VerificationError,), "tlog_verify consistency"),
        "rewritten_entry": _refusal(lambda: tlog_verify.verify_bundle(rewritten, key_text),
                                    (tlog_verify.VerificationError,), "tlog_verify bundle"),
        "truncated_tail_witness": _refusal(lambda: witness.witness_step(
            state=held, note=earlier.note, log_key=key_text, tiles=served), refused, "audit_witness"),
        "truncated_tail_verifier": _refusal(lambda: tlog_verify.verify_checkpoints_consistent(
            latest.note, earlier.note, [], key_text), (tlog_verify.VerificationError,), "tlog_verify consistency"),
        "fork_at_leaf_index": fork_at,
    }  # fmt: skip
