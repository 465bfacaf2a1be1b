"""Benchmark results as committed JSON: which command printed them, on what machine, when.

Every file under `bench/results/` is one JSON object with top-level `command` (the
command line that printed it), `machine` (what it ran on: uname, CPUs, Python, load
average) and `date` (UTC, ISO 8601). Benchmark commands build their report with
`stamped(...)`; `make bench` runs each command through this module's command line,
which writes the file and fills in any of the three keys a command did not print:

    python -m kiln.benchjson bench/results/audit_bench.json -- python manage.py audit_bench --json

No Django import, so the runner and the checker in the tests work without settings.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["REQUIRED", "command_line", "machine", "now", "problems", "stamped", "main"]

REQUIRED = ("command", "machine", "date")


def now() -> str:
    """The current UTC time as ISO 8601 with seconds: `2026-12-01T11:09:01+00:00`."""
    return datetime.now(UTC).isoformat(timespec="seconds")


# A fixed single-thread workload (interpreter loop, SHA-256, JSON round trip): the same code on
# every machine, so two results can be compared across machines by its time as well as their own.
_REFERENCE_DOC = {
    "seq": 1,
    "actor": "alice",
    "data": {"cpu": 4, "names": [f"n{i}" for i in range(64)]},
}


def _reference_once() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(200_000):
        total += i * i
    text = json.dumps(_REFERENCE_DOC)
    for _ in range(2_000):
        hashlib.sha256(text.encode()).digest()
        json.loads(text)
    return (time.perf_counter() - start) * 1000.0


def cpu_reference_ms(repeats: int = 7) -> float:
    """Median milliseconds of the fixed workload above after one warm-up run (lower is faster)."""
    _reference_once()
    return round(statistics.median(_reference_once() for _ in range(repeats)), 2)


def machine() -> dict:
    """What the benchmark ran on: kernel, architecture, CPUs, Python, 1/5/15-minute load, and
    `cpu_reference_ms`, this machine's time for a fixed workload (compare results across
    machines by it: a result taken where it is twice as long is not comparable one for one)."""
    uname = platform.uname()
    return {
        "uname": f"{uname.system} {uname.release} {uname.machine}",
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpu_reference_ms": cpu_reference_ms(),
    }


def command_line(name: str, argv: list[str] | None = None) -> str:
    """`python manage.py <name> <args>` as typed, when this process is that command.

    A management command called in process (`call_command`, the tests) has no command
    line of its own; it is named without arguments.
    """
    argv = sys.argv if argv is None else argv
    if len(argv) >= 2 and argv[1] == name:
        return shlex.join(["python", "manage.py", name, *argv[2:]])
    return f"python manage.py {name}"


def stamped(result: dict, *, name: str, date: str, argv: list[str] | None = None) -> dict:
    """`result` with `command`, `machine` and `date` first (`date`: when the run started).

    A `machine` object the command reports itself (its own load figures) is kept, over ours.
    """
    own = result.get("machine")
    host = machine() | own if isinstance(own, dict) else machine()
    rest = {key: value for key, value in result.items() if key != "machine"}
    return {"command": command_line(name, argv), "machine": host, "date": date, **rest}


def problems(data: object) -> list[str]:
    """What keeps `data` from being a committed result: the missing or empty required keys."""
    if not isinstance(data, dict):
        return [f"the top level is a JSON {type(data).__name__}, not an object"]
    out = [f"no {key!r}" for key in REQUIRED if not data.get(key)]
    if data.get("command") and not isinstance(data["command"], str):
        out.append("'command' is not a string")
    if isinstance(data.get("date"), str):
        try:
            datetime.fromisoformat(data["date"].replace("Z", "+00:00"))
        except ValueError:
            out.append(f"'date' {data['date']!r} is not ISO 8601")
    elif data.get("date"):
        out.append("'date' is not a string")
    return out


def _last_json(text: str) -> object:
    """The JSON a command printed: all of stdout, else its last line (progress lines first)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            raise ValueError("the command printed nothing on stdout") from None
        return json.loads(lines[-1])


def main(args: list[str] | None = None) -> int:
    """`python -m kiln.benchjson OUT -- COMMAND...`: run COMMAND, write its stamped JSON to OUT."""
    args = sys.argv[1:] if args is None else args
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m kiln.benchjson OUT.json -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    out, command = Path(args[0]), args[2:]
    date = now()
    run = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)  # noqa: S603
    if run.returncode != 0:
        print(f"{shlex.join(command)} exited {run.returncode}; nothing written", file=sys.stderr)
        return run.returncode
    try:
        data = _last_json(run.stdout)
    except ValueError as exc:
        print(f"{shlex.join(command)}: no JSON on stdout ({exc})", file=sys.stderr)
        return 1
    if not isinstance(data, dict):
        data = {"result": data}
    filled = {"command": shlex.join(command), "machine": machine(), "date": date}
    stamp = {key: data.get(key) or filled[key] for key in REQUIRED}
    data = stamp | {key: value for key, value in data.items() if key not in REQUIRED}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
