"""kube-scheduler's side of the extender's HTTP protocol: the client the simulated
kube-scheduler and the extender benchmark call the extender with. No Django."""

from __future__ import annotations

import socket

import orjson


class HttpExtender:
    """kube-scheduler's extender client: POST /scheduler/<verb> on one keep-alive connection.

    A lean HTTP/1.1 client on a socket, as Go's is lean: one write a request, the response
    read by its Content-Length. Python's `http.client` parsed every response's headers with
    the `email` package and built each request in several steps, a third of the simulated
    kube-scheduler's busy time in a profile of cluster_bench (seed 1), which is time the real
    kube-scheduler does not spend. A connection the server closed is opened again once per
    call; any other failure (refused, reset, a malformed answer) is an HTTP 503 with the
    reason, which the pass reports as the extender's failure for that pod (kube-scheduler
    fails the cycle alike).
    """

    def __init__(
        self, host: str, port: int, *, token: str = "", timeout: float = 30.0, prefix: str = ""
    ) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.prefix = (prefix.rstrip("/") or "/scheduler").encode()
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self._headers = f"Host: {host}:{port}\r\nContent-Type: application/json\r\n{auth}".encode()
        self._sock: socket.socket | None = None
        self._buffer = b""

    def __call__(self, verb: str, body: bytes) -> tuple[int, bytes]:
        """One extender call: (status, response body)."""
        failure: Exception | None = None
        request = b"POST %s/%s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            self.prefix, verb.encode(), self._headers, len(body), body,
        )  # fmt: skip
        for _ in range(2):
            try:
                if self._sock is None:
                    self._sock = socket.create_connection((self.host, self.port), self.timeout)
                    self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    self._buffer = b""
                self._sock.sendall(request)
                return self._response()
            except (OSError, ValueError) as exc:
                self.close()
                failure = exc
        return 503, orjson.dumps({"Error": f"extender unreachable: {failure!r}"})

    def _response(self) -> tuple[int, bytes]:
        head = self._read_until(b"\r\n\r\n")
        status_line, *lines = head.split(b"\r\n")
        version, _, rest = status_line.partition(b" ")
        if not version.startswith(b"HTTP/1.") or not rest[:3].isdigit():
            raise ValueError(f"not an HTTP/1.x response: {status_line[:80]!r}")
        headers = {}
        for line in lines:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().lower()
        length = headers.get(b"content-length", b"")
        if not length.isdigit():
            raise ValueError("a response without a Content-Length (the extender always sends one)")
        body = self._read_exact(int(length))
        if headers.get(b"connection") == b"close":
            self.close()
        return int(rest[:3]), body

    def _read_until(self, marker: bytes) -> bytes:
        """The buffered bytes before `marker` (consumed with it), reading as needed."""
        while (end := self._buffer.find(marker)) < 0:
            self._fill()
        head, self._buffer = self._buffer[:end], self._buffer[end + len(marker) :]
        return head

    def _read_exact(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill()
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def _fill(self) -> None:
        assert self._sock is not None
        chunk = self._sock.recv(max(65536, len(self._buffer)))
        if not chunk:
            raise ConnectionResetError("the extender closed the connection")
        self._buffer += chunk

    def close(self) -> None:
        """Close the connection (the next call opens a new one)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buffer = b""


__all__ = ["HttpExtender"]
