"""Calls to configured addresses (kiln/outbound.py): link-local, multicast and unspecified
addresses are refused on every address of their ranges, private ones only when not allowed,
public ones never; the connection is checked before a byte of the request, TLS included."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import urllib.error
import urllib.request

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


# The IPv6 forms that carry an IPv4 address and reach it: mapped, 6to4, NAT64, Teredo's client.
WRAPPERS = {
    "mapped": lambda v4: ipaddress.IPv6Address((0xFFFF << 32) | int(v4)),
    "6to4": lambda v4: ipaddress.IPv6Address((0x2002 << 112) | (int(v4) << 80)),
    "nat64": lambda v4: ipaddress.IPv6Address((0x64FF9B << 96) | int(v4)),
    "teredo": lambda v4: ipaddress.IPv6Address((0x20010000 << 96) | (int(v4) ^ 0xFFFFFFFF)),
}


@given(address=ipv4, wrapper=st.sampled_from(sorted(WRAPPERS)), allow_private=st.booleans())
def test_an_ipv4_address_written_as_ipv6_gets_the_same_answer(address, wrapper, allow_private):
    plain = outbound.address_refusal(str(address), allow_private=allow_private)
    wrapped = outbound.address_refusal(str(WRAPPERS[wrapper](address)), allow_private=allow_private)
    assert bool(plain) == bool(wrapped), (address, wrapper, plain, wrapped)


@given(address=ipv4, allow_private=st.booleans())
def test_an_ipv4_address_is_refused_exactly_when_it_is_not_public_and_not_allowed(
    address, allow_private
):
    refused = outbound.address_refusal(str(address), allow_private=allow_private)
    never = address.is_link_local or address.is_multicast or address.is_unspecified
    never = never or address in outbound.METADATA
    assert bool(refused) == (never or (not address.is_global and not allow_private)), refused


@given(address=ipv6, allow_private=st.booleans())
def test_an_ipv6_address_is_refused_only_for_a_reason_it_gives(address, allow_private):
    refused = outbound.address_refusal(str(address), allow_private=allow_private)
    carries_ipv4 = any(
        address in ipaddress.ip_network(net)
        for net in ("::ffff:0:0/96", "2002::/16", "2001::/32", "64:ff9b::/96", "64:ff9b:1::/48")
    )
    if not refused or carries_ipv4:
        return
    private = not address.is_global or address.is_site_local
    never = address.is_link_local or address.is_multicast or address.is_unspecified
    assert never or address in outbound.METADATA or (private and not allow_private), refused


@pytest.mark.parametrize(
    ("address", "private_allowed"),
    [("::1", True), ("fec0::1", True), ("fd12::1", True), ("2606:4700::1111", True),
     ("64:ff9b::808:808", True), ("2002:a9fe:a9fe::", False), ("::ffff:169.254.169.254", False)],
)  # fmt: skip
def test_ipv6_loopback_site_local_and_wrapped_addresses(address, private_allowed):
    assert bool(outbound.address_refusal(address, allow_private=True)) != private_allowed


@pytest.mark.parametrize("host", ["2852039166", "0xa9.0xfe.0xa9.0xfe", "0251.0376.0251.0376"])
def test_an_address_in_a_form_the_resolver_takes_is_refused_when_set(host):
    assert "link-local" in outbound.url_refusal(f"http://{host}/", allow_private=True)


def test_no_proxy_from_the_environment_is_used(monkeypatch, listener):
    port, received = listener  # a proxy would call the refused address for Kiln
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{port}")
    opener = outbound.opener(allow_private=True)
    assert not any(isinstance(h, urllib.request.ProxyHandler) for h in opener.handlers)
    with pytest.raises(urllib.error.URLError):
        opener.open("http://169.254.169.254/latest/meta-data/", timeout=1)
    assert received == []


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
