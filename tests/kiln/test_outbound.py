"""Calls to configured addresses (kiln/outbound.py): link-local, multicast and unspecified
addresses are refused on every address of their ranges, private ones only when not allowed,
public ones never; the connection is checked before a byte of the request, TLS included."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import urllib.error

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln import outbound


def _in(network: str) -> st.SearchStrategy[str]:
    net = ipaddress.ip_network(network)
    first, last = int(net.network_address), int(net.broadcast_address)
    return st.integers(first, last).map(lambda n: str(ipaddress.ip_address(n)))


ipv4 = st.integers(0, 2**32 - 1).map(lambda n: ipaddress.IPv4Address(n))
ipv6 = st.integers(0, 2**128 - 1).map(lambda n: ipaddress.IPv6Address(n))


@given(address=_in("169.254.0.0/16") | _in("fe80::/10"), allow_private=st.booleans())
def test_every_link_local_address_is_refused(address, allow_private):
    assert "link-local" in outbound.address_refusal(address, allow_private=allow_private)
    assert outbound.url_refusal(f"http://[{address}]/" if ":" in address else f"http://{address}/",
                                allow_private=allow_private)  # fmt: skip


@given(address=_in("169.254.0.0/16"), allow_private=st.booleans())
def test_a_link_local_address_written_as_ipv6_is_refused_too(address, allow_private):
    mapped = f"::ffff:{address}"
    assert "link-local" in outbound.address_refusal(mapped, allow_private=allow_private)


@given(address=ipv4 | ipv6, allow_private=st.booleans())
def test_any_address_is_refused_exactly_when_it_is_not_public_and_not_allowed(
    address, allow_private
):
    ip = address.ipv4_mapped if getattr(address, "ipv4_mapped", None) else address
    refused = outbound.address_refusal(str(address), allow_private=allow_private)
    never = ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved
    never = never or ip in outbound.METADATA
    assert bool(refused) == (never or (not ip.is_global and not allow_private)), (address, refused)


@pytest.mark.parametrize("address", ["100.100.100.200", "fd00:ec2::254", "169.254.170.2"])
def test_cloud_metadata_services_are_refused_even_where_private_networks_are_allowed(address):
    assert outbound.address_refusal(address, allow_private=True)


@pytest.mark.parametrize("url", ["http://chat.example/hook", "https://10.1.2.3/hook"])
def test_names_and_allowed_private_addresses_pass_the_set_time_check(url):
    assert outbound.url_refusal(url, allow_private=True) == ""


@pytest.fixture
def listener():
    """A loopback TCP listener that records whether anything was sent to it."""
    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    received.append(conn.recv(4096))
                except OSError:
                    received.append(b"")

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], received
    server.close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_refused_address_gets_no_byte_of_the_request(listener, scheme):
    port, received = listener
    with pytest.raises(urllib.error.URLError) as err:
        outbound.opener(allow_private=False).open(f"{scheme}://localhost:{port}/hook", timeout=5)
    assert isinstance(err.value.reason, outbound.DestinationRefused)
    assert all(chunk == b"" for chunk in received)  # no request line, no TLS hello


def test_an_allowed_tls_destination_is_checked_and_then_handshaken(listener):
    port, received = listener
    with pytest.raises(urllib.error.URLError) as err:  # the listener speaks no TLS
        outbound.opener(allow_private=True).open(f"https://127.0.0.1:{port}/hook", timeout=5)
    assert not isinstance(err.value.reason, outbound.DestinationRefused)
    assert isinstance(err.value.reason, (ssl.SSLError, OSError))
    assert received and received[0][:1] == b"\x16"  # a TLS handshake record reached it
