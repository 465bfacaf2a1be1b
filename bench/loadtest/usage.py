"""CPU beyond Kiln's own processes during a load run: the PostgreSQL and Redis servers the
shape stands on, and how busy the whole machine was.

On a small machine the load generator, the database and Kiln's processes share the same cores,
so a latency figure means little without knowing whether the cores were saturated. These
figures say so: `machine_busy_share` near 1.0 means every core was busy for the whole window,
and the per-server CPU says who took it.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import redis
from django.conf import settings
from django.db import DatabaseError, connection
from prometheus_client.parser import text_string_to_metric_families

from tests.support.shape import tree_cpu_seconds


def _stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def postgres_cpu_seconds() -> tuple[int, float] | None:
    """(postmaster pid, CPU seconds) of the PostgreSQL server this process talks to, if it runs
    on this machine: the postmaster with its live backends, plus the backends that have exited
    (their time is the postmaster's reaped children's). None when it cannot be read here."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]
        if not Path(f"/proc/{backend}/comm").read_text().startswith("postgres"):
            return None  # the server runs elsewhere: that pid here is another process
        postmaster = int(_stat_fields(backend)[1])
        fields = _stat_fields(postmaster)
    except (DatabaseError, OSError, IndexError, ValueError):
        return None
    reaped = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime
    return postmaster, tree_cpu_seconds(postmaster) + reaped


def redis_cpu_seconds() -> tuple[int, float] | None:
    """(pid, CPU seconds) of the Redis server, from its own INFO; None when it cannot be asked."""
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return None
    try:
        info = redis.Redis.from_url(url, socket_connect_timeout=2).info()
    except (redis.RedisError, OSError):
        return None
    return int(info["process_id"]), float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every core since boot, from /proc/stat (user to steal;
    guest time is already counted in user)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values) - idle, sum(values)


def snapshot() -> dict[str, object]:
    """The servers' (pid, CPU seconds) and the machine's (busy, total) ticks now."""
    return {
        "postgres": postgres_cpu_seconds(),
        "redis": redis_cpu_seconds(),
        "machine": machine_ticks(),
    }


def servers(before: dict[str, object], after: dict[str, object]) -> dict[str, float]:
    """CPU seconds each server spent between two snapshots; a server that could not be read,
    or was restarted in between (its counters started again), is left out."""
    out = {}
    for name in ("postgres", "redis"):
        then, now = before.get(name), after.get(name)
        if then is not None and now is not None and then[0] == now[0]:  # type: ignore[index]
            out[name] = now[1] - then[1]  # type: ignore[index]
    return out


def busy_share(before: dict[str, object], after: dict[str, object]) -> float:
    """The share of all cores' time that was busy between two snapshots (1.0: saturated)."""
    (busy0, total0), (busy1, total1) = before["machine"], after["machine"]  # type: ignore[misc]
    return round((busy1 - busy0) / (total1 - total0), 3) if total1 > total0 else 0.0


def web_gc_pauses(base_url: str) -> dict[str, dict[str, float]]:
    """The web's garbage collection pauses so far, from its `/metrics` (every web process's sum):
    per generation, how many, their seconds, and how many lasted over 50 ms."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:  # noqa: S310 - the shape's own loopback URL
        text = response.read().decode()
    pauses: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "kiln_gc_pause_seconds":
            continue
        for sample in family.samples:
            generation = pauses.setdefault(
                sample.labels["generation"], {"count": 0, "seconds": 0.0, "over_50ms": 0}
            )
            if sample.name.endswith("_count"):
                generation["count"] = int(sample.value)
            elif sample.name.endswith("_sum"):
                generation["seconds"] = round(sample.value, 3)
            elif sample.name.endswith("_bucket") and sample.labels["le"] == "0.05":
                generation["over_50ms"] = -int(sample.value)  # the count is added below
    for generation in pauses.values():
        generation["over_50ms"] += generation["count"]
    return dict(sorted(pauses.items()))
