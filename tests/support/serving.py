"""Threaded HTTP servers for the tests, which stop without waiting.

`socketserver`'s `serve_forever` looks for `shutdown()` every half second by default, so each
stop of a test server waited up to that long: most of the time of many tests that start one.
"""

from __future__ import annotations

import threading
from socketserver import BaseServer

POLL_SECONDS = 0.05  # how often a serving thread looks for a stop


def serve_in_thread(
    server: BaseServer, *, name: str | None = None, start: bool = True
) -> threading.Thread:
    """A daemon thread running `server.serve_forever`, started unless `start` is false."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, name=name, daemon=True
    )
    if start:
        thread.start()
    return thread
