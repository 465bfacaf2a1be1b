"""Long-lived processes keep what they load at startup out of the garbage collector.

CPython's full collection (of its oldest generation) walks every container object the
process holds, with the GIL held. A web process holds over 100,000 once Django, the apps,
numpy and numba are loaded, and under the paced load test every one of its full collections
took over 50 ms on the two-core machine (docs/operations.md#garbage-collection): every request
in that process waited as long. `gc.freeze()` moves everything alive into a generation no
collection walks. Objects made later are collected as before, and a frozen object is still
freed by reference counting when its last reference goes; only reference cycles among frozen
objects are never freed, and at startup those are modules, classes and functions, which live
as long as the process anyway.

A full collection would still walk what a process imports on its first requests, so the web
freezes after importing every view through the URL configuration (`import_views`). What its
first requests still add (caches, pooled connections, modules imported on first use) is alive
after its first full collections; the web freezes that too, after each of the first
`WARM_UP_FULL_COLLECTIONS` (a reference cycle in flight at that moment is never freed: a few
objects, three times in the life of a process). The load test measured the web's full
collections without the freeze, with the startup freeze only, and with both
(docs/operations.md#garbage-collection).

The web times every collection (`time_collections`) and exports the pauses as
`kiln_gc_pause_seconds{generation}`. The collector's callback only appends to a list: it runs
inside whatever allocation set off the collection, possibly while the same thread holds the
metrics library's lock, so the pauses reach the histogram after each request (`publish_pauses`).
KILN_GC_FREEZE=0 turns the freeze off, to compare.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable, Iterable

from django.urls import URLResolver, get_resolver
from prometheus_client import Histogram

GC_PAUSE = Histogram(
    "kiln_gc_pause_seconds",
    "Garbage collection pauses (the GIL is held: every thread of the process waits)",
    ["generation"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)
# (generation, seconds) not yet in GC_PAUSE; appends and pops are atomic, and a process that
# answers no request keeps the latest few thousand.
_pending: deque[tuple[int, float]] = deque(maxlen=4096)
_started: list[float] = []
WARM_UP_FULL_COLLECTIONS = 3
OLDEST = 2  # CPython's generations are 0, 1 and 2: collecting 2 is a full collection
_refreezes_left = [0]


def freeze_after(load: Callable[[], object] | None = None) -> int:
    """Run `load`, collect once, and freeze every object alive; returns how many are frozen."""
    if load is not None:
        load()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def import_views() -> int:
    """Import the URL configuration and every module it includes (the views, their serializers
    and services); returns the number of URL patterns."""

    def count(patterns: Iterable) -> int:
        return sum(count(p.url_patterns) if isinstance(p, URLResolver) else 1 for p in patterns)

    return count(get_resolver().url_patterns)


def _on_collection(phase: str, info: dict) -> None:
    if phase == "start":
        _started[:] = [time.perf_counter()]
    elif _started:
        _pending.append((info["generation"], time.perf_counter() - _started.pop()))


def time_collections(*, refreeze: int = 0) -> None:
    """Time this process's collections from now on (once per process); with `refreeze`, freeze
    what is alive after each of the next `refreeze` full collections as well."""
    _refreezes_left[0] = refreeze
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def refreezes_left() -> int:
    """How many more full collections will be followed by a freeze."""
    return _refreezes_left[0]


def publish_pauses() -> None:
    """Move the pauses timed so far into `GC_PAUSE` (outside any collection), and freeze after a
    warm-up full collection."""
    full = False
    while _pending:
        generation, seconds = _pending.popleft()
        GC_PAUSE.labels(str(generation)).observe(seconds)
        full = full or generation == OLDEST
    if full and _refreezes_left[0] > 0:
        _refreezes_left[0] -= 1
        gc.freeze()
