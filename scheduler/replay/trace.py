"""Read the Google clusterdata-2011-2 tables (gzip CSV, no header) into numpy arrays.

Columns (trace schema v2.1, see the data folder's SOURCE.md):
  machine_events: timestamp, machine_id, event_type (0 ADD, 1 REMOVE, 2 UPDATE), platform, cpus, memory
  task_events: timestamp, missing_info, job_id, task_index, machine_id, event_type, user,
               scheduling_class, priority, cpu_request, memory_request, disk_request, different_machine
Timestamps are microseconds; cpu and memory are normalised to the largest machine (<= 1).
Only the task events that place or free a task are kept: SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST.
"""

from __future__ import annotations

import gzip
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MACHINE_ADD, MACHINE_REMOVE, MACHINE_UPDATE = 0, 1, 2
SUBMIT, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST = 0, 1, 2, 3, 4, 5, 6
END_EVENTS = frozenset({EVICT, FAIL, FINISH, KILL, LOST})
KEPT_TASK_EVENTS = frozenset({SCHEDULE}) | END_EVENTS
TASK_INDEX_BITS = 21  # task key = job_id << 21 | task_index (task indexes stay below 2^21)

MACHINE_FILE = Path("machine_events") / "part-00000-of-00001.csv.gz"
TASK_DIR = Path("task_events")
PART_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


class TraceError(ValueError):
    """The trace folder or a part selection is missing or malformed."""


@dataclass
class MachineEvents:
    """machine_events as arrays in time order; cpu/mem NaN where the trace left them empty."""

    time: np.ndarray
    machine: np.ndarray
    kind: np.ndarray
    cpu: np.ndarray
    mem: np.ndarray


@dataclass
class TaskEvents:
    """The kept task events as arrays in time order; machine is -1 where the trace has none."""

    time: np.ndarray
    key: np.ndarray
    machine: np.ndarray
    kind: np.ndarray
    priority: np.ndarray
    cpu: np.ndarray
    mem: np.ndarray

    def __len__(self) -> int:
        return int(self.time.shape[0])


@dataclass
class Trace:
    """One loaded trace slice: all machine events plus the chosen task_events parts."""

    machines: MachineEvents
    tasks: TaskEvents
    parts: list[int]
    rows_read: int
    parse_seconds: float


def parse_parts(spec: str) -> list[int]:
    """'0-13' or '0,2,5-7' -> sorted part numbers."""
    spec = spec.replace(" ", "")
    if not PART_RE.match(spec):
        raise TraceError(f"parts must look like 0-13 or 0,2,5-7, not {spec!r}")
    parts: set[int] = set()
    for piece in spec.split(","):
        lo, _, hi = piece.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first or last > 499:
            raise TraceError(f"part range {piece!r} is empty or beyond part 499")
        parts.update(range(first, last + 1))
    return sorted(parts)


def _float(field: str) -> float:
    return float(field) if field else float("nan")


def read_machine_events(trace_dir: Path) -> MachineEvents:
    """Read the whole machine_events table."""
    path = trace_dir / MACHINE_FILE
    if not path.is_file():
        raise TraceError(f"{path} is missing")
    rows: list[tuple[int, int, int, float, float]] = []
    with gzip.open(path, "rt") as handle:
        for line in handle:
            f = line.rstrip("\n").split(",")
            rows.append((int(f[0]), int(f[1]), int(f[2]), _float(f[4]), _float(f[5])))
    rows.sort(key=lambda r: r[0])  # stable: same-time rows keep file order
    data = list(zip(*rows, strict=True)) if rows else [(), (), (), (), ()]
    return MachineEvents(
        time=np.array(data[0], dtype=np.int64),
        machine=np.array(data[1], dtype=np.int64),
        kind=np.array(data[2], dtype=np.int8),
        cpu=np.array(data[3], dtype=np.float64),
        mem=np.array(data[4], dtype=np.float64),
    )


def read_task_events(
    trace_dir: Path,
    parts: list[int],
    *,
    max_rows: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[TaskEvents, int]:
    """Read the kept task events of the given parts (at most max_rows raw rows in total)."""
    times: list[int] = []
    keys: list[int] = []
    machines: list[int] = []
    kinds: list[int] = []
    prios: list[int] = []
    cpus: list[float] = []
    mems: list[float] = []
    rows = 0
    kept = {str(k) for k in KEPT_TASK_EVENTS}
    for part in parts:
        path = trace_dir / TASK_DIR / f"part-{part:05d}-of-00500.csv.gz"
        if not path.is_file():
            raise TraceError(f"{path} is missing")
        with gzip.open(path, "rt") as handle:
            for line in handle:
                if max_rows is not None and rows >= max_rows:
                    break
                rows += 1
                f = line.split(",")
                if f[5] not in kept:
                    continue
                times.append(int(f[0]))
                keys.append((int(f[2]) << TASK_INDEX_BITS) | int(f[3]))
                machines.append(int(f[4]) if f[4] else -1)
                kinds.append(int(f[5]))
                prios.append(int(f[8]))
                cpus.append(float(f[9]) if f[9] else 0.0)
                mems.append(float(f[10]) if f[10] else 0.0)
        if progress is not None:
            progress(f"read task_events part {part}: {rows} rows so far")
        if max_rows is not None and rows >= max_rows:
            break
    events = TaskEvents(
        time=np.array(times, dtype=np.int64),
        key=np.array(keys, dtype=np.int64),
        machine=np.array(machines, dtype=np.int64),
        kind=np.array(kinds, dtype=np.int8),
        priority=np.array(prios, dtype=np.int8),
        cpu=np.array(cpus, dtype=np.float64),
        mem=np.array(mems, dtype=np.float64),
    )
    return events, rows


def load_trace(
    trace_dir: Path | str,
    parts: list[int],
    *,
    max_rows: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> Trace:
    """Read machine_events and the chosen task_events parts, timing the read and parse."""
    trace_dir = Path(trace_dir)
    if not trace_dir.is_dir():
        raise TraceError(f"trace folder {trace_dir} does not exist")
    started = time.perf_counter()
    machines = read_machine_events(trace_dir)
    tasks, rows = read_task_events(trace_dir, parts, max_rows=max_rows, progress=progress)
    return Trace(machines, tasks, parts, rows, time.perf_counter() - started)
