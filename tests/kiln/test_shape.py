"""The production shape's ports: a run of ports that bind, below the ephemeral range."""

from __future__ import annotations

import socket

import pytest

from tests.support.shape import free_port, port_binds


@pytest.mark.parametrize("span", [1, 2, 4])
def test_a_free_port_and_the_ones_above_it_all_bind(span):
    port = free_port(span=span)
    assert 20000 <= port < 32000 and port % span == 0
    probes = [socket.socket() for _ in range(span)]
    try:
        for i, probe in enumerate(probes):
            probe.bind(("127.0.0.1", port + i))
    finally:
        for probe in probes:
            probe.close()


def test_a_port_in_use_does_not_bind():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        assert not port_binds(held.getsockname()[1])
