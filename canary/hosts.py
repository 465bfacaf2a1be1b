"""Service hosts of one namespace: which names a canary service or chaos fault may route (no Django).

A VirtualService in namespace `ns` may only name a Kubernetes Service of `ns`,
in one of the four forms Istio resolves to it:

    svc                         (a short name, resolved in the VirtualService's namespace)
    svc.ns
    svc.ns.svc
    svc.ns.svc.cluster.local    (the fully qualified name; one trailing dot allowed)

Case is folded (DNS names are case-insensitive) only after checking the text is
ASCII, so no Unicode case mapping (the Kelvin sign K, dotted capital I) can turn
a foreign name into an allowed one. Everything else is refused: wildcards, IP
addresses, ports, other domains, whitespace, empty labels, and any form that
names another namespace. `canonical_service_host` returns the fully qualified
form, which Kiln stores and writes, so no reader has to resolve a short name again.
"""

from __future__ import annotations

import re

CLUSTER_DOMAIN = "cluster.local"
MAX_HOST_CHARS = 253
# A Kubernetes Service name is a DNS-1035 label: it starts with a letter, so no label of a
# host Kiln accepts in the service position can be read as part of an IPv4 address.
SERVICE_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# A namespace is a DNS-1123 label.
NAMESPACE_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

MALFORMED = "malformed"
FOREIGN = "foreign"


class HostRefused(ValueError):
    """Why a host is refused: `kind` is MALFORMED (not a service host) or FOREIGN (another namespace)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


FORMS = ("<svc>", "<svc>.<ns>", "<svc>.<ns>.svc", f"<svc>.<ns>.svc.{CLUSTER_DOMAIN}")


def canonical_service_host(host: object, namespace: str) -> str:
    """`<svc>.<namespace>.svc.cluster.local` for a host naming a service of `namespace`.

    Raises HostRefused(MALFORMED) when `host` is not one of FORMS (or `namespace` is
    not a DNS-1123 label), HostRefused(FOREIGN) when it names another namespace.
    """
    if not isinstance(namespace, str) or not NAMESPACE_LABEL.fullmatch(namespace):
        raise HostRefused(MALFORMED, "the namespace is not a DNS-1123 label")
    if not isinstance(host, str) or not host:
        raise HostRefused(MALFORMED, "the host is empty")
    if len(host) > MAX_HOST_CHARS + 1:
        raise HostRefused(MALFORMED, f"the host is longer than {MAX_HOST_CHARS} characters")
    if not host.isascii() or not host.isprintable():
        raise HostRefused(MALFORMED, "the host must be printable ASCII (a DNS name)")
    name = host.lower()
    if name.endswith("."):
        name = name[:-1]  # an absolute name: "checkout.shop.svc.cluster.local."
    if "*" in name:
        raise HostRefused(MALFORMED, "wildcard hosts are not allowed")
    if ":" in name or "/" in name or "@" in name:
        raise HostRefused(MALFORMED, "a host is a DNS name: no port, path, scheme or user")
    labels = name.split(".")
    if any(not label for label in labels):
        raise HostRefused(MALFORMED, "the host has an empty label")
    if all(label.isdigit() for label in labels) or _looks_like_ip(labels):
        raise HostRefused(MALFORMED, "IP addresses are not service hosts")
    service, rest = labels[0], labels[1:]
    if not SERVICE_LABEL.fullmatch(service):
        raise HostRefused(
            MALFORMED, f"{service!r} is not a Kubernetes Service name (a DNS-1035 label)"
        )
    if rest:
        target_ns, suffix = rest[0], rest[1:]
        if not NAMESPACE_LABEL.fullmatch(target_ns):
            raise HostRefused(MALFORMED, f"{target_ns!r} is not a namespace (a DNS-1123 label)")
        if suffix not in ([], ["svc"], ["svc", *CLUSTER_DOMAIN.split(".")]):
            raise HostRefused(
                MALFORMED,
                f"a service host has one of the forms {', '.join(FORMS)}; "
                f"{'.'.join(suffix)!r} is not the cluster's service domain",
            )
        if target_ns != namespace:
            raise HostRefused(
                FOREIGN, f"the host names namespace {target_ns}, not the service's {namespace}"
            )
    return f"{service}.{namespace}.svc.{CLUSTER_DOMAIN}"


def _looks_like_ip(labels: list[str]) -> bool:
    """Dotted-decimal or hex/octal IPv4 spellings (`127.1`, `0x7f.1`), which resolvers accept."""
    return all(re.fullmatch(r"(0x[0-9a-f]*|[0-9]+)", label) for label in labels)
