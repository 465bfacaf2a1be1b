"""How long `make test` takes, in one process per run (as before) and on pytest-xdist workers.

    python -m kiln.benchjson bench/results/suite_time-<date>.json -- \\
        python bench/suite_time.py --rounds 2 --variant serial=0,0 --variant parallel=2,2

Each variant is `name=FAST_WORKERS,SLOW_WORKERS[,ORDER]`, run as `make test TEST_WORKERS=.. \\
TEST_SLOW_WORKERS=.. [TEST_ORDER=ORDER]` (0: one pytest process, no xdist; ORDER after or
beside); the variants alternate round by round, so a change in the machine's pace falls on
both. With `--paths tests/portal ...` it times one pytest run of the tests not marked slow under
those paths instead (`-n FAST_WORKERS`), against DATABASE_URL and REDIS_URL as set; with
`--slow` as well, of the tests marked slow there (`-n SLOW_WORKERS`). `--checkout NAME=DIR` runs
variant NAME in another checkout (a clean clone of an earlier revision, say), to compare
revisions alternately on the same machine.
Prints one JSON object: per run the wall-clock seconds, the CPU seconds of everything it ran
(user and system), each pytest run's closing line and seconds, the exit code, the 1-minute load
average and the machine's pace (`cpu_reference_ms`, lower is faster) before and after; per
variant the median wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kiln.benchjson import cpu_reference_ms  # noqa: E402 - Django-free, after the path

# pytest's closing line: "==== 2 failed, 103 passed, 4824 deselected in 2203.39s (0:36:43) ===="
# (without the bars under -q).
SUMMARY = re.compile(
    r"^=* ?(?P<counts>[0-9]+ (?:passed|failed|error|errors|skipped|deselected)\b.*?)"
    r" in (?P<seconds>[0-9.]+)s\b.*$",
    re.MULTILINE,
)


ORDERS = ("after", "beside")  # the Makefile's TEST_ORDER; its default is the first


def variant(text: str) -> tuple[str, int, int, str | None]:
    """`parallel=2,2` -> ("parallel", 2, 2, None); `after=2,4,after` -> (..., "after"): the
    Makefile's TEST_ORDER (after: the slow run once the fast one is done; beside: both at once)."""
    name, _, workers = text.partition("=")
    fast, _, rest = workers.partition(",")
    slow, _, order = rest.partition(",")
    if order not in ("", *ORDERS):
        raise argparse.ArgumentTypeError(f"the order is one of {', '.join(ORDERS)}, not {order!r}")
    return name, int(fast), int(slow or fast), order or None


def command(
    fast: int, slow: int, paths: list[str], marked_slow: bool = False, order: str | None = None
) -> list[str]:
    """`make test` with the given worker counts, or one pytest run over `paths`: of the tests
    not marked slow on `fast` workers, or of those marked slow on `slow` workers."""
    if not paths:
        make = ["make", "test", f"TEST_WORKERS={fast}", f"TEST_SLOW_WORKERS={slow}"]
        return [*make, f"TEST_ORDER={order}"] if order else make
    marker, workers = ("slow", slow) if marked_slow else ("not slow", fast)
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", marker]
    return [*pytest, "-n", str(workers), "--dist", "loadgroup", *paths]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(
    name: str,
    fast: int,
    slow: int,
    paths: list[str],
    marked_slow: bool = False,
    checkout: Path = ROOT,
    order: str | None = None,
) -> dict:
    """One run with the given worker counts: wall clock, CPU and its pytest summaries."""
    argv = command(fast, slow, paths, marked_slow, order)
    load_before = os.getloadavg()[0]
    pace_before = cpu_reference_ms()
    cpu_before = _children_cpu()
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=checkout, capture_output=True, text=True)
    wall = time.monotonic() - started
    cpu = _children_cpu() - cpu_before
    # The whole output stays beside the figures, for the names of whatever failed.
    log = ROOT / "var" / f"suite_time-{name}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text(proc.stdout + proc.stderr)
    summaries = [
        {"line": m.group("counts"), "seconds": float(m.group("seconds"))}
        for m in SUMMARY.finditer(proc.stdout)
    ]
    return {
        "variant": name,
        "checkout": str(checkout),
        "revision": _revision(checkout),
        "command": " ".join(argv),
        "fast_workers": fast,
        "slow_workers": slow,
        "order": order or ORDERS[0],  # as run (a checkout older than TEST_ORDER: beside)
        "wall_seconds": round(wall, 1),
        # Everything the run started and waited for: pytest, its workers, browsers, servers.
        "cpu_seconds": round(cpu, 1),
        "returncode": proc.returncode,
        "log": str(log.relative_to(ROOT)),
        # The fast run's summary comes first, then the slow run's (make test prints its log after).
        "pytest_runs": summaries,
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(os.getloadavg()[0], 2),
        "cpu_reference_ms_before": pace_before,
        "cpu_reference_ms_after": cpu_reference_ms(),
    }


def _revision(checkout: Path) -> str | None:
    proc = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True
    )
    return proc.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    """Run the variants alternately and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--variant",
        action="append",
        type=variant,
        help="name=FAST_WORKERS,SLOW_WORKERS[,after|beside]",
    )
    parser.add_argument("--paths", nargs="*", default=[], help="time pytest over these instead")
    parser.add_argument(
        "--slow", action="store_true", help="with --paths: the tests marked slow there"
    )
    parser.add_argument(
        "--checkout", action="append", default=[], help="NAME=DIR: run variant NAME in DIR"
    )
    args = parser.parse_args(argv)
    checkouts = {}
    for text in args.checkout:
        key, _, directory = text.partition("=")
        checkouts[key] = Path(directory).resolve()
    variants = args.variant or [variant("serial=0,0"), variant("parallel=2,2")]
    runs = []
    for round_no in range(args.rounds):
        order = variants if round_no % 2 == 0 else list(reversed(variants))
        for name, fast, slow, test_order in order:
            checkout = checkouts.get(name, ROOT)
            runs.append(run_once(name, fast, slow, args.paths, args.slow, checkout, test_order))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    report = {
        "benchmark": "suite_time",
        "target": "make test under 600 s on this two-core machine when quiet",
        "paths": args.paths or None,
        "marked_slow": args.slow if args.paths else None,
        "runs": runs,
        "median_wall_seconds": {
            name: statistics.median(r["wall_seconds"] for r in runs if r["variant"] == name)
            for name, *_ in variants
        },
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
