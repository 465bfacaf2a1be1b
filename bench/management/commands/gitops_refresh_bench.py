"""Commit-to-synced time through the gitops backend and a simulated Argo CD, with the refresh
call after each commit and without it (Argo CD's poll alone). Prints JSON.

Each mode gets its own bare repository and simulated Argo CD (a real HTTP server on
127.0.0.1). Commits arrive after a random pause of up to one poll interval (seeded), so they
land at random points of the poll cycle, as real commits do. Commit time is when the push
returned; synced time is when the simulated Argo CD had applied that revision. No constant is
tuned on these figures: the poll interval is a parameter (Argo CD's default is 180 s; the
bench scales it down so a run takes minutes), and the seed only places the commits.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from django.core.management.base import BaseCommand

from kiln import benchjson
from kiln.cluster.argocd import ArgoCDRefresher
from kiln.cluster.gitops import GitOpsBackend
from tests.support.argocd_sim import SimulatedArgoCD

TOKEN = "gitops-refresh-bench"  # noqa: S105 - the loopback simulator's token, not a secret


def _manifest(revision: int) -> list[dict]:
    labels = {"kiln.dev/environment": "bench-env", "kiln.dev/team": "bench"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "bench", "namespace": "bench-env", "labels": labels},
            "data": {"revision": str(revision)},
        }
    ]


def _summary(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    return {
        "commits": len(ordered),
        "commit_to_synced_median_s": round(statistics.median(ordered), 4),
        "commit_to_synced_mean_s": round(statistics.fmean(ordered), 4),
        "commit_to_synced_p95_s": round(ordered[max(0, round(0.95 * len(ordered)) - 1)], 4),
        "commit_to_synced_max_s": round(ordered[-1], 4),
        "commit_to_synced_min_s": round(ordered[0], 4),
    }


class Command(BaseCommand):
    help = "Commit-to-synced time with and without the Argo CD refresh call (JSON)."

    def add_arguments(self, parser):
        parser.add_argument("--commits", type=int, default=15)
        parser.add_argument("--poll-seconds", type=float, default=4.0)
        parser.add_argument("--sync-seconds", type=float, default=0.05)
        parser.add_argument("--seed", type=int, default=11)
        parser.add_argument("--port", type=int, default=8180, help="first of two ports")
        parser.add_argument("--json", action="store_true", help="print JSON (the only output)")

    def _run(self, *, mode: str, root: Path, port: int, rng: random.Random, opts) -> dict:
        repo = root / f"{mode}.git"
        gitops = GitOpsBackend(str(repo), work_dir=root / f"{mode}-work")
        gitops.apply(_manifest(0))
        latencies: list[float] = []
        with SimulatedArgoCD(
            repo,
            poll_seconds=opts["poll_seconds"],
            sync_seconds=opts["sync_seconds"],
            token=TOKEN,
            port=port,
        ) as argocd:
            if mode == "refresh":
                gitops.refresher = ArgoCDRefresher(argocd.url, token=TOKEN)
            for i in range(1, opts["commits"] + 1):
                time.sleep(rng.uniform(0, opts["poll_seconds"]))
                gitops.apply(_manifest(i))
                revision, committed = gitops.last_revision, gitops.last_pushed_at
                deadline = time.monotonic() + 2 * opts["poll_seconds"] + 10
                while revision not in argocd.synced_at and time.monotonic() < deadline:
                    time.sleep(0.005)
                if revision not in argocd.synced_at:
                    raise RuntimeError(f"{mode}: revision {revision} never synced")
                latencies.append(argocd.synced_at[revision] - committed)
            polls, refreshes = argocd.polls, argocd.refreshes
        return {**_summary(latencies), "polls": polls, "refreshes": refreshes}

    def handle(self, *args, **opts):
        started_at = benchjson.now()
        rng = random.Random(opts["seed"])
        with tempfile.TemporaryDirectory(prefix="kiln-gitops-refresh-") as tmp:
            modes = {
                mode: self._run(
                    mode=mode, root=Path(tmp), port=opts["port"] + i, rng=rng, opts=opts
                )
                for i, mode in enumerate(("refresh", "poll"))
            }
        result = {
            "poll_seconds": opts["poll_seconds"],
            "sync_seconds": opts["sync_seconds"],
            "seed": opts["seed"],
            "seed_note": "the seed places commits in the poll cycle; nothing is tuned on it",
            "modes": modes,
            "median_speedup": round(
                modes["poll"]["commit_to_synced_median_s"]
                / max(modes["refresh"]["commit_to_synced_median_s"], 1e-9),
                1,
            ),
        }
        result = benchjson.stamped(result, name="gitops_refresh_bench", date=started_at)
        self.stdout.write(json.dumps(result, indent=2))
