"""One benchmark command run with and without a piece of speed machinery, alternated round by round.

    python -m kiln.benchjson bench/results/<name>-2026-12-06.json -- \\
        python bench/alternate.py --rounds 3 --variant with=KILN_X=1 --variant without=KILN_X=0 \\
            --metric http.varied.p99_ms -- python manage.py extender_bench --json ...

Each variant is `name=VAR=VALUE[,VAR=VALUE...]`: the environment the command runs under. The
variants alternate (with, without, then without, with, ...), so a change in the machine's pace
falls on both. Each `--metric` is a dotted path into the JSON the command prints (list items by
index). Prints one JSON object: every run's metrics, exit code and 1-minute load average before
and after; per variant the median of each metric; and the first variant's median over each
other's (below 1: the first is faster where the metric is a time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def variant(text: str) -> tuple[str, dict[str, str]]:
    """`without=KILN_X=0,KILN_Y=1` -> ("without", {"KILN_X": "0", "KILN_Y": "1"})."""
    name, _, assignments = text.partition("=")
    env = dict(part.split("=", 1) for part in assignments.split(",") if part)
    return name, env


def pick(data: object, path: str) -> object:
    """The value at a dotted path (`http.varied.p99_ms`, `runs.0.ms`), or None."""
    for key in path.split("."):
        if isinstance(data, list) and key.lstrip("-").isdigit():
            data = data[int(key)] if -len(data) <= int(key) < len(data) else None
        elif isinstance(data, dict):
            data = data.get(key)
        else:
            return None
    return data


def last_json(text: str) -> object:
    """What the command printed: all of stdout as JSON, else its last line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.strip()]
        return json.loads(lines[-1]) if lines else None


def run_once(name: str, env: dict[str, str], command: list[str], metrics: list[str]) -> dict:
    """One run of `command` under `env`: its metrics, exit code and the load around it."""
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                          text=True, check=False)  # fmt: skip
    out = {"variant": name, "env": env, "returncode": proc.returncode,
           "wall_seconds": round(time.monotonic() - started, 1)}  # fmt: skip
    try:
        data = last_json(proc.stdout) if proc.returncode == 0 else None
    except json.JSONDecodeError:
        data = None
    if data is None:
        out["stderr_tail"] = proc.stderr[-800:]
    out["metrics"] = {m: pick(data, m) for m in metrics}
    out["load_1min_before"] = round(load_before, 2)
    out["load_1min_after"] = round(os.getloadavg()[0], 2)
    return out


def report(runs: list[dict], names: list[str], metrics: list[str]) -> dict:
    """Per variant the median of each metric over its runs; the first's over each other's."""
    medians = {}
    for name in names:
        medians[name] = {}
        for m in metrics:
            values = [r["metrics"][m] for r in runs if r["variant"] == name]
            numbers = [v for v in values if isinstance(v, int | float)]
            medians[name][m] = round(statistics.median(numbers), 4) if numbers else None
    first = names[0]
    ratios = {
        f"{first}_over_{other}": {
            m: round(medians[first][m] / medians[other][m], 3)
            if medians[first][m] is not None and medians[other][m]
            else None
            for m in metrics
        }
        for other in names[1:]
    }
    return {"medians": medians, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    """Run the variants alternately and print the JSON report."""
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        print("usage: bench/alternate.py [options] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", action="append", type=variant, required=True)
    parser.add_argument("--metric", action="append", required=True)
    parser.add_argument("--target", default="", help="the target the docs name, for the record")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    names = [name for name, _ in args.variant]
    runs = []
    for round_no in range(args.rounds):
        order = args.variant if round_no % 2 == 0 else list(reversed(args.variant))
        for name, env in order:
            runs.append(run_once(name, env, command, args.metric))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    out = {
        "benchmark": "alternate",
        "command_alternated": " ".join(command),
        "variants": {name: env for name, env in args.variant},
        "target": args.target or None,
        "rounds": args.rounds,
        "runs": runs,
        **report(runs, names, args.metric),
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(out, indent=2))
    return 0 if all(r["returncode"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
