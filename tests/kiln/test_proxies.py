"""kiln.proxies: whose X-Forwarded-For is believed, and every launcher of uvicorn told the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kiln import proxies

ROOT = Path(__file__).resolve().parents[2]
P = proxies.parse_trusted_proxies


@pytest.mark.parametrize(
    ("peer", "forwarded", "trusted", "client"),
    [
        # No trusted proxy: the header is the client's own claim, never read.
        ("10.0.0.1", "203.0.113.7", "", "10.0.0.1"),
        ("127.0.0.1", "203.0.113.7", "", "127.0.0.1"),
        # The peer is our proxy: the entry it appended is the client; the left one a claim.
        ("10.0.0.1", "6.6.6.6, 203.0.113.7", "10.0.0.1", "203.0.113.7"),
        # Two of our proxies in a row (a CIDR and an address): skip both.
        ("10.0.0.1", "6.6.6.6, 203.0.113.7, 10.0.0.9", "10.0.0.0/24", "203.0.113.7"),
        # An untrusted peer sending a header: the header is ignored whatever it says.
        ("198.51.100.1", "10.0.0.1", "10.0.0.0/24", "198.51.100.1"),
        # A trusted peer with no header: the peer is the client.
        ("10.0.0.1", "", "10.0.0.1", "10.0.0.1"),
        # Every hop ours: the farthest one, as uvicorn answers.
        ("10.0.0.1", "10.0.0.3, 10.0.0.2", "10.0.0.0/24", "10.0.0.3"),
        # Ports and brackets, IPv4-mapped IPv6, a canonical IPv6 spelling.
        ("10.0.0.1", "203.0.113.7:5123", "10.0.0.1", "203.0.113.7"),
        ("::ffff:10.0.0.1", "[2001:DB8:0::1]:443", "10.0.0.1", "2001:db8::1"),
        # Not an address where it decides: one shared placeholder, never stored garbage.
        ("10.0.0.1", "unknown", "10.0.0.1", proxies.UNKNOWN_ADDRESS),
        (None, "203.0.113.7", "", proxies.UNKNOWN_ADDRESS),
        ("not-an-ip", "", "", proxies.UNKNOWN_ADDRESS),
    ],
    ids=[
        "untrusted-peer-header-ignored",
        "loopback-is-not-trusted-by-default",
        "one-proxy",
        "two-proxies",
        "untrusted-peer-claims-a-proxy",
        "trusted-peer-no-header",
        "all-trusted",
        "port",
        "ipv6-and-mapped",
        "proxy-forwarded-garbage",
        "no-peer",
        "peer-not-an-address",
    ],
)
def test_client_address_is_the_rightmost_untrusted_hop(peer, forwarded, trusted, client):
    assert proxies.client_address(peer, forwarded, P(trusted)) == client


def test_the_rule_is_idempotent_after_uvicorn_put_the_client_in_the_peers_place():
    trusted = P("10.0.0.0/24")
    client = proxies.client_address("10.0.0.1", "6.6.6.6, 203.0.113.7", trusted)
    assert proxies.client_address(client, "6.6.6.6, 203.0.113.7", trusted) == client


def test_trusted_proxies_parse_addresses_and_networks_and_refuse_anything_else():
    assert P("") == () and P(" , ") == ()
    assert [str(n) for n in P("10.0.0.5, 10.1.0.0/16,::1")] == [
        "10.0.0.5/32",
        "10.1.0.0/16",
        "::1/128",
    ]
    with pytest.raises(ValueError, match="'ingress' is not an IP address or a CIDR network"):
        P("10.0.0.5, ingress")


def test_uvicorn_options_follow_the_setting():
    assert proxies.uvicorn_options(()) == {"proxy_headers": False, "forwarded_allow_ips": ""}
    assert proxies.uvicorn_args(()) == ["--no-proxy-headers"]
    assert proxies.uvicorn_args(P("10.0.0.0/8")) == [
        "--proxy-headers",
        "--forwarded-allow-ips",
        "10.0.0.0/8",
    ]


def test_uvicorns_own_middleware_agrees_with_kiln(settings):
    """The same chain through uvicorn's ProxyHeadersMiddleware gives Kiln's answer."""
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    for trusted, peer, forwarded in [
        ("10.0.0.0/24", "10.0.0.1", "6.6.6.6, 203.0.113.7, 10.0.0.9"),
        ("", "127.0.0.1", "6.6.6.6"),
        ("10.0.0.1", "10.0.0.1", "6.6.6.6"),
    ]:
        seen = {}

        async def app(scope, receive, send, seen=seen):
            seen["client"] = scope["client"][0]

        options = proxies.uvicorn_options(P(trusted))
        wrapped = (
            ProxyHeadersMiddleware(app, trusted_hosts=options["forwarded_allow_ips"])
            if options["proxy_headers"]
            else app
        )
        scope = {
            "type": "http",
            "client": (peer, 5000),
            "headers": [(b"x-forwarded-for", forwarded.encode())],
        }
        import asyncio

        asyncio.run(wrapped(scope, None, None))
        assert seen["client"] == proxies.client_address(peer, forwarded, P(trusted))


def _deploy_uvicorn_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec", {}) if isinstance(doc, dict) else {}
            pod = spec.get("template", {}).get("spec", {}) if isinstance(spec, dict) else {}
            for container in pod.get("containers", []) if isinstance(pod, dict) else []:
                command = [*container.get("command", []), *container.get("args", [])]
                if "uvicorn" in command and "kiln.asgi:application" in command:
                    found.append((str(path.relative_to(ROOT)), command))
    return found


def test_every_launcher_of_the_web_passes_the_trusted_proxies_to_uvicorn():
    """uvicorn's own default trusts loopback: no launcher may leave it at that."""
    deployed = _deploy_uvicorn_commands()
    assert deployed, "no web Deployment found under deploy/"
    for path, command in deployed:
        assert "--proxy-headers" not in command, path
        i = command.index("--forwarded-allow-ips")
        assert command[i + 1] == "$(KILN_TRUSTED_PROXIES)", path
    dockerfile = (ROOT / "deploy/kiln/Dockerfile").read_text()
    assert '--forwarded-allow-ips \\"${KILN_TRUSTED_PROXIES:-}\\"' in dockerfile
    makefile = (ROOT / "Makefile").read_text()
    launches = re.findall(r"-m uvicorn kiln\.asgi:application[^&]*&", makefile)
    assert launches and all("$(UVICORN_PROXY_ARGS)" in launch for launch in launches)
    for module in ("tests/support/shape.py", "bench/management/commands/audit_tlog_bench.py"):
        assert "proxies.uvicorn_args(settings.KILN_TRUSTED_PROXIES)" in (ROOT / module).read_text()
    standalone = (ROOT / "kiln/management/commands/standalone.py").read_text()
    assert "proxies.uvicorn_options(settings.KILN_TRUSTED_PROXIES)" in standalone
