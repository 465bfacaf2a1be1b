"""What one Kiln process costs to start: `django.setup()` in a fresh interpreter, per checkout.

    python -m kiln.benchjson bench/results/startup_time-<date>.json -- \\
        python bench/startup_time.py --rounds 15 \\
            --checkout before=/tmp/clone-before:none --checkout after=/tmp/clone-after:compiled

Each `--checkout NAME=DIR:BYTECODE` is a checkout (a clean clone of a revision, say) and what
its own modules' bytecode is while it is timed: `none` (every `__pycache__` under the apps
removed first, as in a clean clone where PYTHONDONTWRITEBYTECODE is set) or `compiled` (made
first with `compileall`, as `make test` does). The checkouts alternate round by round, so a
change in the machine's pace falls on all. Prints one JSON object: per checkout the median,
min and max wall-clock and CPU seconds of a start, and which of the libraries that only some
processes use (numba, the kubernetes client, cel-python's parser) a start loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kiln.benchjson import cpu_reference_ms  # noqa: E402 - Django-free, after the path

APPS = ("kiln", "portal", "canary", "scheduler", "audit")
PROBE = (
    "import sys, django; django.setup(); "
    "print(sorted(m for m in ('numba', 'kubernetes', 'lark') if m in sys.modules))"
)


def _bytecode(directory: Path, mode: str) -> None:
    for app in APPS:
        for cache in (directory / app).rglob("__pycache__"):
            for compiled in cache.glob("*.pyc"):
                compiled.unlink()
    if mode == "compiled":
        subprocess.run([sys.executable, "-m", "compileall", "-q", *APPS], cwd=directory, check=True)
    elif mode != "none":
        raise SystemExit(f"bytecode is none or compiled, not {mode!r}")


def _start(directory: Path) -> tuple[float, float, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "kiln.settings"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=directory, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--checkout", action="append", required=True, metavar="NAME=DIR:BYTECODE")
    args = parser.parse_args(argv)
    checkouts = []
    for spec in args.checkout:
        name, _, rest = spec.partition("=")
        directory, _, mode = rest.rpartition(":")
        checkouts.append((name, Path(directory), mode))
    for _, directory, mode in checkouts:
        if not (directory / "manage.py").exists():
            raise SystemExit(f"{directory} is not a Kiln checkout")
        _bytecode(directory, mode)
    samples: dict[str, list[tuple[float, float, str]]] = {name: [] for name, _, _ in checkouts}
    pace_before = cpu_reference_ms()
    for round_no in range(args.rounds):
        order = checkouts if round_no % 2 == 0 else list(reversed(checkouts))
        for name, directory, _ in order:
            samples[name].append(_start(directory))
    result = {"rounds": args.rounds, "cpu_reference_ms_before": pace_before, "checkouts": {}}
    for name, directory, mode in checkouts:
        walls = [s[0] for s in samples[name]]
        cpus = [s[1] for s in samples[name]]
        revision = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True
        ).stdout.strip()
        result["checkouts"][name] = {
            "directory": str(directory),
            "revision": revision,
            "bytecode": mode,
            "wall_seconds": {"median": round(statistics.median(walls), 3),
                             "min": round(min(walls), 3), "max": round(max(walls), 3)},
            "cpu_seconds": {"median": round(statistics.median(cpus), 3),
                            "min": round(min(cpus), 3), "max": round(max(cpus), 3)},
            "loaded": sorted({s[2] for s in samples[name]}),
        }  # fmt: skip
    result["cpu_reference_ms_after"] = cpu_reference_ms()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
