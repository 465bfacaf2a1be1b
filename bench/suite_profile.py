"""Where a pytest run's time goes: a sampling profile of the process beside its per-test times.

    py-spy record -r 25 --format raw -o var/suite.raw -- \\
        python -m pytest -p no:cacheprovider -m "not slow" --junitxml=var/suite.xml
    python -m kiln.benchjson bench/results/suite_profile-<date>.json -- \\
        python bench/suite_profile.py var/suite.raw var/suite.xml --rate 25

Prints one JSON object: per test file its wall-clock seconds (the junit times), the CPU seconds
py-spy saw in a frame of that file, and the difference, time the file spent waiting (on a
server, a subprocess, a sleep); and the library functions that took the most CPU, inclusive.
The profile counts only the pytest process, not the processes it starts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

TEST_FILE = re.compile(r"\((tests/[^:]+\.py):")
# Frames that stand for the harness itself: every sample passes through them.
HARNESS = ("pluggy/", "_pytest/", "<frozen runpy>", "pytest/__main__", "threading.py")


def cpu_by_file(raw: Path, rate: float) -> tuple[Counter, Counter, float]:
    """CPU seconds per test file (its outermost frame in tests/), inclusive CPU seconds per
    function, and the total, from py-spy's raw (collapsed stack) output."""
    files: Counter = Counter()
    functions: Counter = Counter()
    total = 0.0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        seconds = int(count) / rate
        total += seconds
        frames = stack.split(";")
        owner = next((m.group(1) for f in frames if (m := TEST_FILE.search(f))), None)
        files[owner or "<outside any test file>"] += seconds
        for name in {re.sub(r":\d+\)", ")", f) for f in frames}:
            if not any(h in name for h in HARNESS):
                functions[name] += seconds
    return files, functions, total


def wall_by_file(junit: Path) -> tuple[Counter, Counter]:
    """Wall-clock seconds and test count per test file, from a junit XML report."""
    wall: Counter = Counter()
    tests: Counter = Counter()
    for case in ET.parse(junit).iter("testcase"):  # noqa: S314 - the run's own report
        path = case.get("classname", "").replace(".", "/") + ".py"
        wall[path] += float(case.get("time") or 0)
        tests[path] += 1
    return wall, tests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path, help="py-spy record --format raw output")
    parser.add_argument("junit", type=Path, help="pytest --junitxml output of the same run")
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's samples a second")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--recorded-with", default="", help="the command that made both files")
    args = parser.parse_args(argv)
    cpu, functions, total = cpu_by_file(args.raw, args.rate)
    wall, tests = wall_by_file(args.junit)
    files = [
        {
            "file": path,
            "tests": tests[path],
            "wall_seconds": round(wall[path], 1),
            "cpu_seconds": round(cpu[path], 1),
            "waiting_seconds": round(max(wall[path] - cpu[path], 0.0), 1),
        }
        for path in wall
    ]
    report = {
        "what": "one pytest run: CPU of the pytest process (py-spy samples) beside junit times",
        "recorded_with": args.recorded_with,
        "tests": sum(tests.values()),
        "wall_seconds_in_tests": round(sum(wall.values()), 1),
        "cpu_seconds_sampled": round(total, 1),
        "cpu_seconds_outside_any_test_file": round(cpu["<outside any test file>"], 1),
        "by_wall": sorted(files, key=lambda f: -f["wall_seconds"])[: args.top],
        "by_waiting": sorted(files, key=lambda f: -f["waiting_seconds"])[: args.top],
        "functions_by_cpu": [
            {"function": name, "cpu_seconds": round(seconds, 1)}
            for name, seconds in functions.most_common(args.top * 6)
        ],
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
