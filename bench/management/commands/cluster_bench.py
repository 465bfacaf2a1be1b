"""Bind N pending pods on M nodes of the simulated cluster through the extender; print JSON."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from bench.scheduler import cluster as bench
from kiln import benchjson
from kiln.cluster.simulated import SimulatedBackend
from scheduler import seed
from scheduler.kubedefault import num_feasible_nodes_to_find


class Command(BaseCommand):
    requires_system_checks: list[str] = []
    help = "cluster_bench: pods/s and p99 bind latency for pending pods bound through the extender."

    def add_arguments(self, parser):
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--pods", type=int, default=10000)
        parser.add_argument("--seed", type=int, default=2)
        parser.add_argument("--node-cache-capable", choices=["true", "false"], default="true")
        parser.add_argument(
            "--transport",
            choices=[bench.HTTP, bench.IN_PROCESS],
            default=bench.HTTP,
            help="how kube-scheduler reaches the extender (default: HTTP, as kube-scheduler does)",
        )
        parser.add_argument(
            "--extender-port",
            type=int,
            default=0,
            help="loopback port of the served extender (0: a free port)",
        )
        parser.add_argument(
            "--spread-group-size",
            type=int,
            default=0,
            help="group the pods of a class into workloads of this many replicas "
            "(kiln.dev/spread-group), so the capacity-pool spread filter applies; 0: bare pods",
        )
        parser.add_argument(
            "--no-pool-rules",
            action="store_true",
            help="hand the extender no pools (own pools, capacity-pool spread): what they cost",
        )
        parser.add_argument("--json", action="store_true", help="print JSON (always on)")

    def handle(self, *args, **opts):
        if opts["spread_group_size"] < 0:
            raise CommandError("--spread-group-size must be 0 (bare pods) or more")
        if opts["nodes"] <= 0 or opts["pods"] <= 0:
            raise CommandError("--nodes and --pods must be positive")
        if not 0 <= opts["extender_port"] <= 65535:
            raise CommandError("--extender-port must be 0-65535")
        started_at = benchjson.now()
        seed.seed_demo()
        backend = SimulatedBackend()
        bench.bench_reset()
        bench.bench_cluster(
            backend=backend,
            nodes=opts["nodes"],
            pods=opts["pods"],
            seed=opts["seed"],
            spread_group_size=opts["spread_group_size"],
        )
        result = {
            "nodes": opts["nodes"],
            "pods": opts["pods"],
            "seed": opts["seed"],
            "spread_group_size": opts["spread_group_size"],
            "pool_rules": not opts["no_pool_rules"],
            "seeds_note": "constants were chosen on seed 1; reported runs use seed 2",
            "node_cache_capable": opts["node_cache_capable"] == "true",
            "transport": {
                "mode": opts["transport"],
                "note": "http: ExtenderASGI under uvicorn (the extender's one-write protocol) on "
                "loopback, one keep-alive connection, answering from the pass's snapshot; "
                "in-process: extender_call called directly",
            },
            "target": {"pods_per_second": 300, "latency_sensitive_on_spot": 0},
            "extender_candidates": {
                "per_pod": num_feasible_nodes_to_find(opts["nodes"]),
                "note": "as kube-scheduler sends them: the first numFeasibleNodesToFind "
                "feasible nodes (adaptive percentageOfNodesToScore) from a rotating start",
            },
        }
        result.update(
            bench.bench_run(
                backend=backend,
                node_cache_capable=result["node_cache_capable"],
                transport=opts["transport"],
                port=opts["extender_port"],
                pool_rules=not opts["no_pool_rules"],
            )
        )
        result["workload_commitment"] = bench.commitment(backend)
        bench.bench_reset()
        self.stdout.write(
            json.dumps(benchjson.stamped(result, name="cluster_bench", date=started_at), indent=2)
        )
