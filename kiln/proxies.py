"""Trusted proxies: whose `X-Forwarded-For` Kiln and its ASGI server believe (no Django import).

One setting, `KILN_TRUSTED_PROXIES` (addresses and CIDR networks, comma-separated; empty by
default: nobody's), decides it for both. uvicorn gets it as `--forwarded-allow-ips` (every
launcher: `uvicorn_options` / `uvicorn_args`); Kiln's own client address (login throttling,
`kiln.identity.throttle`) reads it through `client_address`. Both take the same rule:

    the chain is X-Forwarded-For's entries, then the connection's peer; walking it from the
    right, every trusted address is skipped and the first untrusted one is the client.

A proxy appends the address it saw, so every entry right of the client was written by a
proxy we trust, and everything left of it is the client's own claim, never believed. With
no trusted proxy the peer is the client and the header is never read. The rule is
idempotent: once uvicorn has put the client in the peer's place, the same walk stops there.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Where no usable address is known (no peer, or a trusted proxy wrote something that is
# not one): such clients share one address, so they share its per-address throttle.
UNKNOWN_ADDRESS = "0.0.0.0"  # noqa: S104 - a placeholder value, never bound
MAX_FORWARDED_ENTRIES = 64  # a longer chain is a claim, not a path through our proxies


def parse_trusted_proxies(text: str) -> tuple[Network, ...]:
    """The networks of `KILN_TRUSTED_PROXIES` (a bare address is its own /32 or /128).

    Raises ValueError naming the first entry that is neither an address nor a network.
    """
    networks: list[Network] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(
                f"{entry!r} is not an IP address or a CIDR network (e.g. 10.0.0.5, 10.0.0.0/24)"
            ) from None
    return tuple(networks)


def as_address(value: str) -> Address | None:
    """An address written `1.2.3.4`, `1.2.3.4:5678`, `2001:db8::1` or `[2001:db8::1]:5678`.

    IPv4-mapped IPv6 (`::ffff:1.2.3.4`) is its IPv4 address; anything else is None.
    """
    text = value.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_trusted(address: Address, trusted: Iterable[Network]) -> bool:
    """Whether `address` is one of the trusted proxies."""
    return any(address.version == net.version and address in net for net in trusted)


def client_address(peer: str | None, forwarded_for: str, trusted: Sequence[Network]) -> str:
    """The client's address: the right-most untrusted hop of `forwarded_for` + `peer`.

    Always a canonical IP address (the stored throttle key): `UNKNOWN_ADDRESS` when the
    hop that decides is not an address (no peer, or a trusted proxy forwarded something
    else), as uvicorn leaves it in the peer's place too.
    """
    first = as_address(peer or "")
    if first is None:
        return UNKNOWN_ADDRESS
    if not is_trusted(first, trusted):
        return str(first)
    last_trusted = first
    entries = [e for e in forwarded_for.split(",") if e.strip()][-MAX_FORWARDED_ENTRIES:]
    for entry in reversed(entries):
        address = as_address(entry)
        if address is None:
            return UNKNOWN_ADDRESS
        if not is_trusted(address, trusted):
            return str(address)
        last_trusted = address
    return str(last_trusted)  # every hop a trusted proxy: the farthest one is the client


def uvicorn_options(trusted: Sequence[Network]) -> dict[str, object]:
    """uvicorn.Config keywords that trust forwarded headers from `trusted` only (none: off)."""
    return {
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": ",".join(str(n) for n in trusted),
    }


def uvicorn_args(trusted: Sequence[Network]) -> list[str]:
    """The same as uvicorn command-line options, for launchers that start it as a process."""
    if not trusted:
        return ["--no-proxy-headers"]
    return ["--proxy-headers", "--forwarded-allow-ips", ",".join(str(n) for n in trusted)]
