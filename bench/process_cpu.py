"""Where a run's CPU went, process by process, from the kernel's process accounting.

    touch /var/log/acct-kiln && accton /var/log/acct-kiln   # as root, before the run
    make test                                                # or any other command
    accton off
    python -m kiln.benchjson bench/results/process_cpu-<date>.json -- \\
        python bench/process_cpu.py /var/log/acct-kiln

With `--run -- COMMAND ...` it turns accounting on itself (as root), runs the command (its output
goes to stderr), turns accounting off and adds the command, its exit code and wall seconds: the
form `bench/alternate.py` can alternate (`--metric cpu_seconds`). Accounting sees every process
that ends on the machine while it is on, not only the command's: run it on a quiet machine.

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
import os
import subprocess
import sys
import tempfile
import time

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


def run_accounted(command: list[str]) -> dict:
    """Run `command` with process accounting on: its accounting file, exit code, wall seconds."""
    fd, path = tempfile.mkstemp(prefix="kiln-acct-", dir="/var/tmp")
    os.close(fd)
    subprocess.run(["accton", path], check=True, capture_output=True)
    try:
        start = time.monotonic()
        code = subprocess.run(command, stdout=sys.stderr, check=False).returncode
        wall = time.monotonic() - start
    finally:
        subprocess.run(["accton", "off"], check=True, capture_output=True)
    return {
        "acct_file": path,
        "command": command,
        "returncode": code,
        "wall_seconds": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    argv, command = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("acct_file", nargs="?", help="an accounting file (without --run)")
    parser.add_argument("--largest", type=int, default=25)
    parser.add_argument("--run", action="store_true", help="run the command after -- accounted")
    args = parser.parse_args(argv)
    if args.run and command:
        result = run_accounted(command)
    elif args.acct_file and not args.run:
        result = {"acct_file": args.acct_file}
    else:
        parser.error("give an accounting file, or --run -- COMMAND ...")
    print(json.dumps({**result, **summary(records(result["acct_file"]), args.largest)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
