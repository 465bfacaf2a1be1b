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


def address_refusal(address: str, *, allow_private: bool) -> str:
    """Why Kiln does not call `address` (an IP literal), or "" when it may."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_link_local:
        return f"{ip} is link-local (where cloud metadata answers)"
    if ip in METADATA:
        return f"{ip} is a cloud metadata service"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return f"{ip} is not an address to call"
    if not allow_private and not ip.is_global:
        return f"{ip} is a loopback or private address, and private networks are not allowed"
    return ""


def url_refusal(url: str, *, allow_private: bool) -> str:
    """Why the URL cannot be a destination, as far as it tells without DNS, or "" when it may be."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "http(s) only."
    host = parts.hostname or ""
    if not host:
        return "The URL names no host."
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return ""  # a name: its addresses are checked when it is called
    refusal = address_refusal(host, allow_private=allow_private)
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
    """A urllib opener that follows no redirect and refuses a connection to an address
    `address_refusal` refuses (raising `DestinationRefused` before a byte of the request)."""

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

    return urllib.request.build_opener(_NoRedirect, HTTP, HTTPS)
