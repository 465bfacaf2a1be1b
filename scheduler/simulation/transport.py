"""How the simulated kube-scheduler reaches Kiln's extender: in the process, or over HTTP.

A transport is a callable `(verb, body) -> (HTTP status, JSON bytes)`:

- in process (the standalone cluster tick): `extender_call` itself, the function
  the HTTP handler serves, answering from the snapshot the pass hands it;
- `HttpExtender` (scheduler/extender/client.py): kube-scheduler's HTTP extender client, `POST
  <urlPrefix>/<filterVerb|prioritizeVerb>` over one keep-alive HTTP/1.1
  connection, as `cluster_bench` measures it;
- `served_extender`: the extender's own ASGI app (`ExtenderASGI`) under uvicorn
  with its one-write protocol (`ExtenderHttpProtocol`), the server
  `scheduler_extender` runs, on a loopback port in a thread of this process, so
  it answers from the pass's snapshot (the extender's inventory lag, as in
  process) while every call crosses a real socket, HTTP framing and the ASGI app.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from django.conf import settings

from scheduler.extender.client import HttpExtender
from scheduler.extender.handler import ExtenderASGI
from scheduler.extender.server import ExtenderHttpProtocol
from scheduler.extender.snapshot import NodeSnapshot

Transport = Callable[[str, bytes], tuple[int, bytes]]
STARTUP_SECONDS = 30.0


@contextmanager
def served_extender(
    snapshot_source: Callable[[], NodeSnapshot], *, port: int = 0, host: str = "127.0.0.1"
) -> Iterator[HttpExtender]:
    """The extender's ASGI app served on `host:port` (0: a free port) in a thread; yields its client."""
    config = uvicorn.Config(
        ExtenderASGI(snapshot_source),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        # No lifespan: the dedicated process freezes its heap out of the collector at startup
        # (`ExtenderASGI`), which here would freeze the caller's heap too.
        lifespan="off",
        http=ExtenderHttpProtocol,
        ws="none",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="extender-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the extender did not start on {host}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    client = HttpExtender(host, bound, token=settings.KILN_SCHEDULER_EXTENDER_TOKEN or "")
    try:
        yield client
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=10)


__all__ = ["HttpExtender", "Transport", "served_extender"]
