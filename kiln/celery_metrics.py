"""Celery's own figures and the worker's and beat's metrics servers.

- `kiln_celery_task_failures_total{task}` and `kiln_celery_task_retries_total{task}`, counted
  where the task ran (a prefork worker's pool processes: the worker Deployment sets
  PROMETHEUS_MULTIPROC_DIR so its /metrics sums them, as the web's does).
- `kiln_celery_queue_messages{queue}` (messages waiting, every priority of the queue) and
  `kiln_celery_unacked_messages` (delivered, not yet acknowledged), read from the Redis broker
  when scraped; exported by beat only, one process, so no series is counted twice.
- The worker (`worker_init`) and beat (`beat_init`) start their metrics and probe servers
  (kiln/metrics_server.py) when KILN_METRICS_PORT is set: ready when the database and the broker
  answer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import redis as redis_lib
from celery import Celery, signals
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("kiln.celery.metrics")

TASK_FAILURES = Counter(
    "kiln_celery_task_failures_total", "Celery tasks that raised (after their retries)", ["task"]
)
TASK_RETRIES = Counter("kiln_celery_task_retries_total", "Celery task retries", ["task"])

# kombu's Redis transport keeps one list per priority step: the queue's own name for step 0,
# `<name>\x06\x16<step>` for the others (kombu.transport.redis, PRIORITY_STEPS, sep).
PRIORITY_STEPS = (0, 3, 6, 9)
PRIORITY_SEPARATOR = "\x06\x16"
UNACKED_KEY = "unacked"


def queue_keys(queue: str) -> list[str]:
    """The Redis lists that hold one queue's messages, one per priority step."""
    return [queue if step == 0 else f"{queue}{PRIORITY_SEPARATOR}{step}" for step in PRIORITY_STEPS]


class QueueDepthCollector(Collector):
    """Messages waiting in each Celery queue and delivered-but-unacknowledged, read from Redis."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def _queues(self) -> list[str]:
        names = {self.app.conf.task_default_queue}
        names.update(q.name for q in (self.app.conf.task_queues or ()))
        return sorted(names)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Read the queue lengths now; nothing when the broker is not Redis or does not answer."""
        url = self.app.conf.broker_url or ""
        if not url.startswith(("redis://", "rediss://")):
            return
        client = redis_lib.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        try:
            pipe = client.pipeline(transaction=False)
            queues = self._queues()
            for queue in queues:
                for key in queue_keys(queue):
                    pipe.llen(key)
            pipe.hlen(UNACKED_KEY)
            lengths = pipe.execute()
        except redis_lib.RedisError as exc:
            log.warning("celery queue depth not exported: %s", exc.__class__.__name__)
            return
        finally:
            client.close()
        depth = GaugeMetricFamily(
            "kiln_celery_queue_messages", "Messages waiting in a Celery queue", labels=["queue"]
        )
        steps = len(PRIORITY_STEPS)
        for i, queue in enumerate(queues):
            depth.add_metric([queue], float(sum(lengths[i * steps : (i + 1) * steps])))
        yield depth
        unacked = GaugeMetricFamily(
            "kiln_celery_unacked_messages", "Celery messages delivered but not yet acknowledged"
        )
        unacked.add_metric([], float(lengths[-1]))
        yield unacked

    def describe(self) -> list:
        """Nothing: registering must not read Redis."""
        return []


def _task_name(sender: Any) -> str:
    return getattr(sender, "name", None) or str(sender)


def on_task_failure(sender: Any = None, **_: Any) -> None:
    """Count a task that raised."""
    TASK_FAILURES.labels(_task_name(sender)).inc()


def on_task_retry(sender: Any = None, **_: Any) -> None:
    """Count a task's retry."""
    TASK_RETRIES.labels(_task_name(sender)).inc()


def _ready_checks() -> dict:
    from kiln import health

    return {"database": health.database, "broker": health.broker}


def on_worker_init(**_: Any) -> None:
    """The worker's metrics and probe server (KILN_METRICS_PORT, 9101 in deploy/)."""
    from kiln import metrics_server

    metrics_server.start_from_env("worker", ready=_ready_checks())


def on_beat_init(**_: Any) -> None:
    """Beat's metrics and probe server (KILN_METRICS_PORT, 9102 in deploy/)."""
    from kiln import metrics_server

    metrics_server.start_from_env("beat", ready=_ready_checks())


def on_worker_process_shutdown(pid: int | None = None, **_: Any) -> None:
    """A pool process ending: its live gauges leave the summed figures (multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR") and pid:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


def install(app: Celery) -> None:
    """Connect the counters and the metrics servers to `app`'s signals; export its queue depths."""
    from kiln import observability

    signals.task_failure.connect(on_task_failure, weak=False)
    signals.task_retry.connect(on_task_retry, weak=False)
    signals.worker_init.connect(on_worker_init, weak=False)
    signals.beat_init.connect(on_beat_init, weak=False)
    signals.worker_process_shutdown.connect(on_worker_process_shutdown, weak=False)
    observability.add_scrape_collector(QueueDepthCollector(app), kind="beat")
