"""Login throttling over real HTTP against a standalone Kiln (uvicorn in front, as in `make run`).

The server trusts one proxy address, 127.0.0.2. A client connecting from 127.0.0.1 is not
that proxy: whatever X-Forwarded-For it sends, uvicorn and Kiln count it as 127.0.0.1. A
connection from 127.0.0.2 is the proxy: the address it forwards is the client.
"""

from __future__ import annotations

import http.client
import re
import urllib.parse

import pytest

from tests.kiln import standalone_process

PROXY = "127.0.0.2"
ADDRESS_LIMIT = 8


@pytest.fixture(scope="module")
def kiln(tmp_path_factory):
    var = tmp_path_factory.mktemp("throttle") / "var"
    server = standalone_process.start(
        var,
        timeout=90,
        environment={
            "KILN_TRUSTED_PROXIES": PROXY,
            "KILN_LOGIN_FAILURE_LIMIT": "3",
            "KILN_LOGIN_ADDRESS_FAILURE_LIMIT": str(ADDRESS_LIMIT),
        },
    )
    try:
        yield server
    finally:
        standalone_process.stop(server, timeout=15)


def login(kiln, username: str, password: str, *, source: str = "127.0.0.1", forwarded=None):
    """GET the sign-in page for its CSRF token, then POST; (status, body) of the POST."""
    url = urllib.parse.urlsplit(kiln.base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=20, source_address=(source, 0))
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    try:
        conn.request("GET", "/accounts/login/", headers=headers)
        page = conn.getresponse()
        html = page.read().decode()
        cookie = re.search(r"csrftoken=([^;]+)", page.getheader("Set-Cookie") or "")[1]
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)[1]
        body = urllib.parse.urlencode(
            {"username": username, "password": password, "csrfmiddlewaretoken": token}
        )
        conn.request(
            "POST",
            "/accounts/login/",
            body=body,
            headers={
                **headers,
                "Cookie": f"csrftoken={cookie}",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def demo_login(kiln) -> tuple[str, str]:
    username = sorted(kiln.logins)[0]
    return username, kiln.logins[username]


def test_a_client_rotating_x_forwarded_for_is_throttled_as_its_own_address(kiln):
    # Spraying one guess per user name, each with a fresh forwarded address: all count
    # against 127.0.0.1, and the address locks at its limit.
    for i in range(ADDRESS_LIMIT):
        status, html = login(kiln, f"spray-{i}", "wrong", forwarded=f"203.0.113.{i + 1}")
        assert status == (200 if i < ADDRESS_LIMIT - 1 else 429), (i, status)
    assert "Too many failed sign-ins from your network address" in html
    assert "paused for 15 minutes" in html and "ask a platform admin" in html
    # Locked for everyone at that address, whatever it claims; the right password too.
    username, password = demo_login(kiln)
    status, _ = login(kiln, username, password, forwarded="198.51.100.77")
    assert status == 429
    # The trusted proxy, forwarding another client, is not that address.
    status, _ = login(kiln, username, password, source=PROXY, forwarded="198.51.100.77")
    assert status == 302


def test_a_trusted_proxys_forwarded_address_counts_per_user_and_address(kiln):
    username, password = demo_login(kiln)
    for _ in range(3):
        login(kiln, username, "wrong", source=PROXY, forwarded="6.6.6.6, 203.0.113.50")
    status, html = login(kiln, username, password, source=PROXY, forwarded="203.0.113.50")
    assert status == 429 and "for this account from your network address" in html
    # The same person from another address, and a colleague from the same one, sign in.
    assert login(kiln, username, password, source=PROXY, forwarded="203.0.113.51")[0] == 302
    other = sorted(kiln.logins)[1]
    assert login(kiln, other, kiln.logins[other], source=PROXY, forwarded="203.0.113.50")[0] == 302
    assert "Traceback" not in kiln.stderr()
