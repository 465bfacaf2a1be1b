"""The web and the worker's pool processes freeze what they hold after startup (kiln/heap.py)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

from celery.signals import worker_process_init

from kiln import heap
from kiln.apps import freeze_worker_heap

ROOT = Path(__file__).resolve().parents[2]
# In a fresh process: load the web application, answer a few requests, then see what a full
# collection has to walk and how long it takes.
WEB_PROCESS = """
import gc, json, sys, time
import kiln.asgi
from django.test import Client
frozen = gc.get_freeze_count()
client = Client()
for path in ("/healthz", "/api/v1/environments/", "/api/v1/rollouts/", "/"):
    client.get(path)
started = time.perf_counter()
gc.collect()
print(json.dumps({
    "frozen": frozen,
    "walked": len(gc.get_objects()),
    "full_collection_ms": (time.perf_counter() - started) * 1000,
    "views_loaded": all(m in sys.modules for m in ("portal.api", "canary.api", "audit.api")),
}))
"""


def test_a_web_process_freezes_its_views_and_leaves_little_for_a_full_collection():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "kiln.settings",
        "KILN_STANDALONE": "1",
        "SECRET_KEY": "a-secret",
    }
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", WEB_PROCESS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Django, the apps, numpy: far more than any request leaves behind.
    assert seen["frozen"] > 100_000, seen
    assert seen["views_loaded"], seen
    # The views were imported before the freeze, so requests leave a few thousand objects for
    # the collector, not the tens of thousands of the modules they would have imported.
    assert seen["walked"] < 20_000, seen


def test_freeze_after_runs_the_loader_first_and_freezes_what_it_made():
    made: list[list[int]] = []
    try:
        count = heap.freeze_after(lambda: made.append(list(range(3))))
        assert made and count > 0 and gc.get_freeze_count() > 0
        assert not any(o is made[0] for o in gc.get_objects())  # frozen: no longer walked
    finally:
        gc.unfreeze()


def test_import_views_counts_every_pattern():
    assert heap.import_views() > 50


def test_each_worker_pool_process_freezes_its_heap_when_it_starts():
    # Kiln's receiver is connected and freezes the heap. It is called alone: sending the signal
    # to this whole process would run every receiver an in-process worker left connected, among
    # them Celery's Django fixup, which closes the descriptors of this thread's connections.
    assert freeze_worker_heap in worker_process_init._live_receivers(None)
    gc.unfreeze()
    try:
        freeze_worker_heap()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def _full_pauses() -> float:
    return sum(
        sample.value
        for family in heap.GC_PAUSE.collect()
        for sample in family.samples
        if sample.name.endswith("_count") and sample.labels["generation"] == "2"
    )


def test_collections_are_timed_and_published_outside_the_collector():
    heap.time_collections()
    heap.time_collections()  # once per process, however often it is called
    assert gc.callbacks.count(heap._on_collection) == 1
    heap.publish_pauses()  # what earlier collections in this process left
    before = _full_pauses()
    gc.collect()
    gc.collect()
    assert _full_pauses() == before  # timed, not yet published: no lock taken in the collector
    heap.publish_pauses()
    assert _full_pauses() >= before + 2  # the collector may also have run a full one itself


def test_the_first_full_collections_after_startup_are_followed_by_a_freeze():
    gc.unfreeze()
    try:
        heap.time_collections(refreeze=2)
        gc.collect(1)  # not a full collection: nothing frozen
        heap.publish_pauses()
        assert gc.get_freeze_count() == 0 and heap.refreezes_left() == 2
        for left in (1, 0, 0):
            gc.collect()
            heap.publish_pauses()
            assert heap.refreezes_left() == left
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        gc.collect()
        heap.publish_pauses()
        assert gc.get_freeze_count() == 0  # the warm-up is over: no more freezes
    finally:
        heap.time_collections(refreeze=0)
        gc.unfreeze()
