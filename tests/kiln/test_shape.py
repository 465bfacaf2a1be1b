"""The production shape's ports: a pair that binds, below the ephemeral range."""

from __future__ import annotations

import socket

from kiln.shape import free_port


def test_a_free_port_and_the_one_above_it_both_bind():
    port = free_port()
    assert 20000 <= port < 32000
    with socket.socket() as low, socket.socket() as high:
        low.bind(("127.0.0.1", port))
        high.bind(("127.0.0.1", port + 1))
