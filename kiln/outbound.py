"""HTTP calls Kiln makes to addresses people configure: answered where they were asked, never
where a redirect points, and never at a link-local, multicast or unspecified address.

A team webhook's URL is a platform admin's to set, but the worker posts to it from inside the
cluster, where 169.254.169.254 answers with the node's cloud credentials. The address is checked
on the connected socket, after DNS, so a name that resolves elsewhere at the last moment (DNS
rebinding) is refused too. Loopback and private networks (every address that is not global)
stay allowed unless `allow_private` is false: a team's chat server is often inside the company's
network. No Django.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import urllib.parse
import urllib.request
from typing import Any

# Cloud metadata services outside the link-local ranges (Alibaba Cloud's; AWS's over IPv6).
METADATA = frozenset(map(ipaddress.ip_address, ("100.100.100.200", "fd00:ec2::254")))


class DestinationRefused(OSError):
    """The URL leads to an address Kiln does not call."""


NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))

IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def _ipv4_inside(ip: IP) -> IP:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo's client, NAT64), else `ip`."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if any(ip in net for net in NAT64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def address_refusal(address: str, *, allow_private: bool) -> str:
    """Why Kiln does not call `address` (an IP literal), or "" when it may."""
    try:
        given = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address} is not an IP address"
    ip = _ipv4_inside(given)
    said = str(ip) if ip == given else f"{given} (that is {ip})"
    if ip.is_link_local:
        return f"{said} is link-local (where cloud metadata answers)"
    if ip in METADATA:
        return f"{said} is a cloud metadata service"
    if ip.is_multicast or ip.is_unspecified:
        return f"{said} is not an address to call"
    # Loopback, private, shared, reserved, and IPv6 site-local (which counts as global).
    private = not ip.is_global or getattr(ip, "is_site_local", False)
    if private and not allow_private:
        return f"{said} is a loopback or private address, and private networks are not allowed"
    return ""


def _literal(host: str) -> str:
    """The host as an IP address when it is one in any form the resolver takes ("2852039166",
    "0xa9.0xfe.0xa9.0xfe"), else ""."""
    try:
        return str(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        pass
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        return ""


def url_refusal(url: str, *, allow_private: bool) -> str:
    """Why the URL cannot be a destination, as far as it tells without DNS, or "" when it may be."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "http(s) only."
    host = parts.hostname or ""
    if not host:
        return "The URL names no host."
    address = _literal(host)
    if not address:
        return ""  # a name: its addresses are checked when it is called
    refusal = address_refusal(address, allow_private=allow_private)
    return f"{refusal}." if refusal else ""


def _check_peer(sock: socket.socket, allow_private: bool) -> None:
    refusal = address_refusal(sock.getpeername()[0], allow_private=allow_private)
    if refusal:
        sock.close()
        raise DestinationRefused(refusal)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def opener(*, allow_private: bool = True) -> urllib.request.OpenerDirector:
    """A urllib opener that follows no redirect, uses no proxy and refuses a connection to an
    address `address_refusal` refuses (raising `DestinationRefused` before a byte of the request)."""

    class Checked(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            _check_peer(self.sock, allow_private)

    class CheckedTLS(http.client.HTTPSConnection):
        def connect(self) -> None:
            # The TCP connection first, checked; then the TLS handshake on it.
            http.client.HTTPConnection.connect(self)
            _check_peer(self.sock, allow_private)
            server_hostname = self._tunnel_host or self.host
            self.sock = self._context.wrap_socket(self.sock, server_hostname=server_hostname)

    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Checked, req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(CheckedTLS, req, context=self._context)

    # Built from the handlers it needs only: no proxy from the environment (the socket would be
    # the proxy's, and the proxy would call the refused address), no file:, ftp: or data: URLs.
    director = urllib.request.OpenerDirector()
    for handler in (
        HTTP(),
        HTTPS(),
        _NoRedirect(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
        urllib.request.UnknownHandler(),
    ):
        director.add_handler(handler)
    return director
