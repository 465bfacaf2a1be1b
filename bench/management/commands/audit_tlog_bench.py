"""Benchmark the transparency log at --entries entries: tree build while appending, tile and proof
serving over HTTP, proof size, offline verification, the tree check and the faults; prints JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from audit.selectors import tree_size
from audit.services import public_key_path, signing_key
from audit.tree import merkle
from bench.audit import tlog
from bench.database import database_url
from bench.waiting import process_gone, wait_until
from kiln import benchjson, proxies

TARGETS = {"writer_end_to_end_events_per_s": 5000, "http_p99_ms": 5.0, "offline_verify_ms": 2.0}


class Command(BaseCommand):
    help = (
        "Fill the audit chain to --entries entries through the writer's append (tree included), "
        "serve it with uvicorn and measure tile and proof latency, proof sizes, offline "
        "verification and the tree check; put a forked log, a rewritten entry and a truncated "
        "tail to the witness and the verifier. Prints JSON."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--entries", type=int, default=1_000_000, help="tree size to measure at"
        )
        parser.add_argument("--batch", type=int, default=settings.KILN_AUDIT_BATCH_SIZE)
        parser.add_argument("--checkpoint-every", type=int, default=100_000)
        parser.add_argument("--requests", type=int, default=2000, help="timed requests per kind")
        parser.add_argument("--bundles", type=int, default=500, help="bundles verified offline")
        parser.add_argument("--seeds", choices=sorted(tlog.SEEDS), default="report")
        parser.add_argument("--port", type=int, default=9251, help="port of the server under test")
        parser.add_argument("--json", action="store_true", help="print only the JSON result")

    def handle(self, *args, **opts):
        started_at, load_start = benchjson.now(), os.getloadavg()
        seed = tlog.SEEDS[opts["seeds"]]
        signing_key()
        filled = tlog.fill(entries=opts["entries"], batch=opts["batch"],
                                 checkpoint_every=opts["checkpoint_every"])  # fmt: skip
        size = tree_size()
        key_text = public_key_path().read_text(encoding="utf-8")
        connection.close()  # the server gets its own connections
        server = self.start_server(opts["port"])
        try:
            client = tlog.Client(opts["port"])
            full_tiles = max(1, size // merkle.TILE_WIDTH)
            kinds = {
                "inclusion_proof": lambda rng: f"/api/v1/audit/proofs/inclusion?seq={rng.randint(1, size)}&size={size}",
                "tile": lambda rng: f"/audit/tlog/tile/0/{merkle.tile_index_path(rng.randrange(full_tiles))}",
                "consistency_proof": lambda rng: f"/api/v1/audit/proofs/consistency?from={rng.randint(1, size)}&to={size}",
                "checkpoint": lambda rng: "/audit/tlog/checkpoint",
            }  # fmt: skip
            latency = tlog.serve_latency(client, kinds, requests=opts["requests"], seed=seed)
            proof_size, bundles = tlog.proofs_and_bundles(
                client, size, count=opts["bundles"], seed=seed
            )
            if not bundles:
                raise CommandError("no proof bundle could be fetched: is a checkpoint signed?")
            offline = tlog.offline_verification(bundles, key_text)
            faults = tlog.faults(client, bundles[0], key_text, fork_at=size // 3)
        finally:
            server.terminate()
            server.wait(timeout=30)
        result = {
            "database": connection.vendor,
            "entries": size,
            "seeds": {"used": opts["seeds"], "seed": seed, **tlog.SEEDS},
            "constants": {
                "warmup_requests_per_kind": tlog.WARMUP,
                "chosen_on": f"tune seed {tlog.SEEDS['tune']}",
            },  # fmt: skip
            "append_with_tree": filled,
            "tree_pure_leaves_per_s": round(tlog.pure_tree_rate()),
            "http": latency,
            "proof_size": proof_size,
            "offline_verify_one_event": offline,
            "tree_check": tlog.tree_check(),
            "faults": faults,
            "targets": TARGETS,
            "notes": (
                "append_with_tree is chain_append alone fed from memory (no recorders or relay): "
                "the writer's ceiling, not end to end; audit_bench measures end to end, tree "
                "included. HTTP figures: one keep-alive client, sequential requests, uvicorn with "
                "one worker, KILN_AUDIT_TLOG_PUBLIC on (tiles and proofs answered beside "
                "Django's middleware, kiln/fast_reads.py; the checkpoint through it)."
            ),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        }
        result = benchjson.stamped(result, name="audit_tlog_bench", date=started_at)
        self.stdout.write(json.dumps(result, indent=None if opts["json"] else 2))

    def start_server(self, port: int) -> subprocess.Popen:
        """uvicorn serving Kiln on `port`, the transparency log public; waits until it answers."""
        env = {**os.environ, "KILN_AUDIT_TLOG_PUBLIC": "1", "KILN_TRACING": "0",
               "KILN_AUDIT_SIGNING_KEY": settings.KILN_AUDIT_SIGNING_KEY,
               "KILN_AUDIT_WITNESSES": settings.KILN_AUDIT_WITNESSES}  # fmt: skip
        if url := database_url():  # this process's database (a test's own, too)
            env["DATABASE_URL"] = url
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "kiln.asgi:application", "--host", "127.0.0.1",
             "--port", str(port), "--log-level", "warning", "--no-access-log",
             *proxies.uvicorn_args(settings.KILN_TRUSTED_PROXIES)],
            cwd=settings.BASE_DIR, env=env, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        client = tlog.Client(port)

        def up() -> bool:
            try:
                return client.get("/audit/tlog/checkpoint")[1] == 200
            except OSError:
                client.conn.close()
                time.sleep(0.2)
                return False

        try:
            wait_until(up, timeout=60, what=lambda: f"the server on port {port} did not answer",
                       gone=process_gone(server, "server"))  # fmt: skip
        except CommandError:
            server.terminate()
            raise
        client.conn.close()
        return server
