"""Where a run's CPU went, process by process, from the kernel's process accounting.

    touch /var/log/acct-kiln && accton /var/log/acct-kiln   # as root, before the run
    make test                                                # or any other command
    accton off
    python -m kiln.benchjson bench/results/process_cpu-<date>.json -- \\
        python bench/process_cpu.py /var/log/acct-kiln

Reads the accounting file with `dump-acct` (Debian's `acct`): one record per process that
ended, with its command name, user and system time and elapsed time. A process's name is that
of the thread that ended last: Chromium's main process shows as `HangWatcher`, a Python process
whose uvloop thread ended last as `libuv-worker`. Prints one JSON object: the total CPU
seconds, the seconds and process count per name, the processes by how much CPU each used, and
the longest processes (CPU and elapsed seconds, start time), so the workers, the servers the
tests start and the browser can be told apart by their lifetimes.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys

BANDS = (0.2, 0.5, 1.0, 2.0, 4.0)


def records(path: str) -> list[dict]:
    """Each ended process: name, CPU seconds (user + system), elapsed seconds, start time."""
    out = subprocess.run(["dump-acct", path], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 13:
            continue
        user, system, elapsed = (float(fields[i]) / 100 for i in (2, 3, 4))
        found.append(
            {"name": fields[0], "cpu": user + system, "elapsed": elapsed, "start": fields[-1]}
        )
    return found


def summary(found: list[dict], longest: int) -> dict:
    by_name: dict[str, list[float]] = collections.defaultdict(list)
    for r in found:
        by_name[r["name"]].append(r["cpu"])
    names = sorted(by_name.items(), key=lambda item: -sum(item[1]))
    bands = collections.Counter()
    for r in found:
        band = next((f"<{b:g}s" for b in BANDS if r["cpu"] < b), f">={BANDS[-1]:g}s")
        bands[band] += 1
    top = sorted(found, key=lambda r: -r["cpu"])[:longest]
    return {
        "processes": len(found),
        "cpu_seconds": round(sum(r["cpu"] for r in found), 1),
        "by_name": [
            {"name": name, "processes": len(cpus), "cpu_seconds": round(sum(cpus), 1)}
            for name, cpus in names
        ],
        "by_cpu_band": dict(sorted(bands.items())),
        "largest": [
            {**r, "cpu": round(r["cpu"], 2), "elapsed": round(r["elapsed"], 1)} for r in top
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("acct_file")
    parser.add_argument("--largest", type=int, default=25)
    args = parser.parse_args(argv)
    result = {"acct_file": args.acct_file, **summary(records(args.acct_file), args.largest)}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
