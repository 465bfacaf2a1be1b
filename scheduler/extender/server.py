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
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

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
