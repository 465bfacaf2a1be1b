"""Benchmark the extender: filter+prioritize latency for N nodes, in process and over HTTP; print JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from bench.scheduler import extender as bench
from kiln import benchjson
from scheduler import kubedefault, selectors
from scheduler.extender.server import extender_serve

# How many different candidate lists `--node-lists varied` sends in turn (more than the
# extender's cache of recent lists holds, so none is served from it).
VARIED_LISTS = 40


def list_size(value: str) -> str:
    """`--list-size`: all, adaptive or a positive whole number."""
    if value in ("all", "adaptive") or (value.isdigit() and int(value) > 0):
        return value
    raise argparse.ArgumentTypeError("use all, adaptive or a positive whole number")


def names_per_call(rule: str, nodes: int) -> int:
    """How many names a filter call carries under `--list-size` `rule` in a cluster of `nodes`."""
    if rule == "all":
        return nodes
    if rule == "adaptive":
        return kubedefault.num_feasible_nodes_to_find(nodes)
    return min(nodes, int(rule))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # measuring/serving commands need no URL checks
    help = "Measure extender latency (p50/p99 ms per filter+prioritize pair, pods/s) for N nodes."

    def add_arguments(self, parser):
        parser.add_argument("--nodes", type=int, default=5000)
        parser.add_argument("--requests", type=int, default=500)
        parser.add_argument("--no-http", action="store_true", help="skip the HTTP measurement")
        parser.add_argument(
            "--node-lists",
            choices=["same", "varied"],
            default="same",
            help="same: every pod of a class sends the same NodeNames list, as a stable cluster "
            "scored in full does; varied: 40 different orders in turn, none repeating within "
            "the extender's cache of recent lists (the cost of a list never seen before)",
        )
        parser.add_argument(
            "--list-size",
            type=list_size,
            default="all",
            help="names per filter call: all (default), adaptive (what kube-scheduler's adaptive "
            "percentageOfNodesToScore finds: 623 of 12,477 nodes) or a number",
        )
        parser.add_argument(
            "--json", action="store_true", help="print JSON (always on; kept for scripts)"
        )
        parser.add_argument(
            "--serve",
            action="store_true",
            help="serve --nodes synthetic nodes on 127.0.0.1:--port with the extender's own "
            "server until stopped (what the HTTP measurement starts as its own process)",
        )
        parser.add_argument("--port", type=int, default=0, help="the port --serve listens on")

    def handle(self, *args, **opts):
        nodes, requests = opts["nodes"], opts["requests"]
        started_at = benchjson.now()
        if nodes <= 0 or requests <= 0:
            raise CommandError("--nodes and --requests must be positive")
        snapshot = bench.synthetic_snapshot(nodes)
        if opts["serve"]:
            if opts["port"] <= 0:
                raise CommandError("--serve needs --port")
            extender_serve(lambda: snapshot, host="127.0.0.1", port=opts["port"])
            return
        weights = selectors.scoring_weights()
        size = names_per_call(opts["list_size"], nodes)
        varied = opts["node_lists"] == "varied"
        lists = VARIED_LISTS if varied else len(bench.CLASSES)
        pairs = bench.node_list_bodies(snapshot, lists=lists, size=size, varied=varied)
        bench.bench_in_process(snapshot, min(20, requests), weights, pairs)  # warm up
        result = {
            "nodes": nodes,
            "requests": requests,
            "mode": "nodeCacheCapable: true (NodeNames)",
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_1m": os.getloadavg()[0],
            },
            "node_lists": opts["node_lists"],
            "list_size": {
                "rule": opts["list_size"],
                "filter_names": size,
                "prioritize_names_mean": round(
                    sum(len(orjson.loads(p)["NodeNames"]) for _, p in pairs) / len(pairs), 1
                ),
            },
            "in_process": bench.bench_in_process(snapshot, requests, weights, pairs),
            "parse_floor": bench.parse_floor(pairs, requests),
        }
        if not opts["no_http"]:
            result["http"] = self._over_http(nodes, requests, pairs)
        result["machine"]["load_1m_after"] = os.getloadavg()[0]
        # Named as invoked: this command or its alias extender_bench.
        name = type(self).__module__.rsplit(".", 1)[-1]
        result = benchjson.stamped(result, name=name, date=started_at)
        self.stdout.write(json.dumps(result, indent=2))

    def _over_http(self, nodes: int, requests: int, pairs: bench.Pairs) -> dict:
        """Serve the synthetic nodes with the extender's own server (`extender_serve`, as
        `scheduler_extender` runs it) in a process of its own on loopback, and measure it."""
        port = _free_port()
        manage = Path(settings.BASE_DIR) / "manage.py"
        cmd = [sys.executable, str(manage), "scheduler_bench", "--serve"]
        cmd += ["--nodes", str(nodes), "--port", str(port)]
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while True:
                if server.poll() is not None:
                    raise CommandError(f"extender exited: {server.stderr.read().decode()[-500:]}")
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if time.monotonic() > deadline:
                    raise CommandError("extender did not start within 60 s")
                time.sleep(0.2)
            token = settings.KILN_SCHEDULER_EXTENDER_TOKEN
            bench.bench_http("127.0.0.1", port, pairs, min(20, requests), token)  # warm up
            out = bench.bench_http("127.0.0.1", port, pairs, requests, token)
            out["server"] = (
                "scheduler_extender (uvicorn httptools, dedicated ASGI app, one write per "
                "response), loopback, keep-alive"
            )
            return out
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
