"""The trace replay's Kiln runs with the compiled placement step and with its numpy reference.

    python -m kiln.benchjson bench/results/scheduler_replay-compiled-<date>.json -- \\
        python -m bench.scheduler.replay_compiled --parts 0 --rounds 3

Replays the chosen task_events parts of the Google trace (`../shared/data/google-2011`) with
Kiln's scheduler, `ReplayConfig.compiled` on and off, alternated round by round, and prints one
JSON object: each run's wall and CPU seconds and placements, the medians per variant, the
numpy reference's CPU over the compiled step's, and the 1-minute load around each run. The
placements of the two are the same (tests/scheduler/test_replay.py), so only the time differs.
No Django: the replay is plain modules.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from pathlib import Path

from kiln import benchjson
from scheduler.replay import ReplayConfig, load_trace, parse_parts, run_replay

TRACE = Path(__file__).resolve().parents[3] / "shared" / "data" / "google-2011"


def main(argv: list[str] | None = None) -> int:
    """Run the two variants alternately and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--parts", default="0")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spot-fraction", type=float, default=0.5)
    args = parser.parse_args(argv)
    started_at = benchjson.now()
    trace = load_trace(args.trace, parse_parts(args.parts))
    variants = [("compiled", True), ("numpy", False)]
    run_replay(trace, ReplayConfig("kiln", args.spot_fraction, "trace", compiled=True))  # warm up
    runs = []
    for round_no in range(args.rounds):
        for name, compiled in variants if round_no % 2 == 0 else variants[::-1]:
            load = os.getloadavg()[0]
            config = ReplayConfig("kiln", args.spot_fraction, "trace", compiled=compiled)
            result = run_replay(trace, config).as_dict()
            runs.append({"variant": name, "wall_seconds": result["wall_seconds"],
                         "cpu_seconds": result["cpu_seconds"], "placed": result.get("placed"),
                         "load_1min_before": round(load, 2)})  # fmt: skip
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    medians = {
        name: {
            key: round(statistics.median(r[key] for r in runs if r["variant"] == name), 2)
            for key in ("wall_seconds", "cpu_seconds")
        }  # fmt: skip
        for name, _ in variants
    }
    out = {
        "benchmark": "scheduler_replay compiled placement against the numpy reference",
        "parts": args.parts,
        "scheduler": "kiln",
        "spot_fraction": args.spot_fraction,
        "start": "trace",
        "target": "parts 0-13 replayed in <= 120 s per run (docs/scheduler.md)",
        "runs": runs,
        "medians": medians,
        "numpy_over_compiled_cpu": round(
            medians["numpy"]["cpu_seconds"] / medians["compiled"]["cpu_seconds"], 2
        ),
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
    }
    out = benchjson.stamped(out, name="replay_compiled", date=started_at)
    out["command"] = shlex.join(["python", "-m", "bench.scheduler.replay_compiled", *sys.argv[1:]])
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
