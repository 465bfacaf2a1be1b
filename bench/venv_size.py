"""How large a virtualenv installed from each lock is: the image's payload beside the base image.

    python bench/venv_size.py --json                      # builds a scratch venv per lock
    python bench/venv_size.py --venv requirements.lock=/tmp/rt --venv requirements-dev.lock=/tmp/dev

Prints one JSON object: per lock, the bytes on disk, the number of distributions and the
largest ten. With `--venv LOCK=DIR` it measures a venv already installed from that lock (its
installed versions are checked against the lock's pins first) instead of building one.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", re.MULTILINE)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path) -> dict[str, str]:
    """The `name==version` pins of a lock file, names normalised (PEP 503)."""
    return {_norm(n): v for n, v in PIN.findall(lock.read_text())}


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise SystemExit(f"{venv} is not a virtualenv (no lib/python3*/site-packages)")
    return found[0]


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def measure(lock: Path, venv: Path) -> dict:
    """Size of `venv` and of each distribution in it, after checking it matches `lock`."""
    site = _site_packages(venv)
    installed = {_norm(d.metadata["Name"]): d for d in metadata.distributions(path=[str(site)])}
    wanted = pins(lock)
    mismatched = {
        n: (v, installed[n].version if n in installed else None)
        for n, v in wanted.items()
        if n not in installed or installed[n].version != v
    }
    if mismatched:
        raise SystemExit(f"{venv} does not match {lock.name}: {mismatched}")
    sizes = {}
    for name, dist in installed.items():
        files = dist.files or []
        sizes[name] = sum((site / f).stat().st_size for f in files if (site / f).is_file())
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:10]
    return {
        "lock": lock.name,
        "venv_bytes": _bytes(venv),
        "distributions": len(wanted),
        "largest": [{"name": n, "bytes": b} for n, b in largest],
    }


def build(lock: Path, into: Path) -> Path:
    """A fresh venv installed from `lock` with --require-hashes."""
    subprocess.run([sys.executable, "-m", "venv", str(into)], check=True)
    subprocess.run(
        [str(into / "bin" / "pip"), "install", "--quiet", "--require-hashes", "-r", str(lock)],
        check=True,
    )
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", action="append", default=[], metavar="LOCK=DIR")
    parser.add_argument("--json", action="store_true", help="print JSON (the only output)")
    args = parser.parse_args(argv)
    given = dict(item.split("=", 1) for item in args.venv)
    report = {"locks": []}
    for lock_name in ("requirements.lock", "requirements-dev.lock"):
        lock = ROOT / lock_name
        if lock_name in given:
            report["locks"].append(measure(lock, Path(given[lock_name])))
            continue
        with tempfile.TemporaryDirectory() as scratch:
            report["locks"].append(measure(lock, build(lock, Path(scratch) / "venv")))
    report["note"] = (
        "bytes of the virtualenv alone; the image adds python:3.11-slim-bookworm and the "
        "application's source"
    )
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
