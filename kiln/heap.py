"""Long-lived processes keep what they load at startup out of the garbage collector.

CPython's full collection (of its oldest generation) walks every container object the
process holds, with the GIL held. A web process holds about 214,000 once Django, the apps,
numpy and numba are loaded, and its full collections took 130 to 370 ms each during the load
test on the two-core machine (docs/operations.md): every request in that process waited as
long. `gc.freeze()` moves everything alive into a generation no collection walks. Objects made
later are collected as before, and a frozen object is still freed by reference counting when
its last reference goes; only reference cycles among frozen objects are never freed, and at
startup those are modules, classes and functions, which live as long as the process anyway.

A full collection would still walk what a process imports on its first requests, so the web
freezes after importing every view through the URL configuration (`import_views`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable

from django.urls import URLResolver, get_resolver


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
