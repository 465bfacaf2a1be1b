"""The HTTP protocol of the dedicated extender process (`scheduler_extender`).

uvicorn's httptools protocol writes a response's status line and headers, then
its body, as two socket writes. kube-scheduler's client then wakes up twice per
call: once for the headers and again for the body (hundreds of kilobytes for
12k nodes). On a busy node every wake-up can wait for a CPU, so the extender
sends each response as one write: `CoalescingTransport` holds a small write
until the next write, or until the event loop's next turn if none follows (a
HEAD response has no body write), so nothing is reordered and nothing waits
longer than that turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from scheduler import scoring_kernel
from scheduler.extender import lookup
from scheduler.extender.handler import ExtenderASGI
from scheduler.extender.snapshot import NodeSnapshot

# Writes smaller than this (status line and headers) are held for the next write.
HOLD_BELOW_BYTES = 16 * 1024


class CoalescingTransport:
    """A transport proxy that sends a held small write together with the write after it."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        """Send data, together with a held write if there is one; hold it if it is small."""
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.writelines((held, data))
        elif len(data) < HOLD_BELOW_BYTES and not self._transport.is_closing():
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        """Send the chunks as one write."""
        self.write(b"".join(chunks))

    def flush(self) -> None:
        """Send a held write now (the event loop calls this on its next turn)."""
        if self._held is not None:
            held, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(held)

    def write_eof(self) -> None:
        """Send a held write, then end the stream."""
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        """Send a held write, then close the transport."""
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class ExtenderHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, sending each response with one socket write."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Set up the connection as uvicorn does, writing through a `CoalescingTransport`."""
        super().connection_made(transport)
        self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]


def extender_serve(
    snapshot_source: Callable[[], NodeSnapshot] | None,
    *,
    host: str,
    port: int,
    log_level: str = "warning",
    tls: dict[str, Any] | None = None,
    when_warm: Callable[[], None] | None = None,
) -> None:
    """Serve kube-scheduler's calls until stopped, as the dedicated extender process does.

    The kernels are compiled or loaded before the first call waits on them (`when_warm` is
    called then: the process's readiness waits for it); then uvicorn serves
    `ExtenderASGI` with `ExtenderHttpProtocol` (one write per response), no access log and no
    websockets. `snapshot_source` None reads the inventory (`scheduler_extender`); a benchmark
    passes its own synthetic nodes, so it measures this same server.
    """
    scoring_kernel.warm_up()
    lookup.warm_up()
    if when_warm is not None:
        when_warm()
    uvicorn.run(
        ExtenderASGI(snapshot_source),
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        http=ExtenderHttpProtocol,  # httptools, one socket write per response
        ws="none",
        **(tls or {}),
    )
