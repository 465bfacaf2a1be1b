"""Standalone smoke test: the real `manage.py standalone` process, start to clean stop."""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar

from django.contrib.staticfiles import finders

from tests.kiln import standalone_process


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_standalone_starts_serves_api_and_login_then_stops_cleanly(tmp_path):
    server = standalone_process.start(tmp_path / "var", timeout=60)
    try:
        status, ready = server.get_json("/readyz")
        assert status == 200
        assert ready["status"] == "ready"
        # One line per stage, in order, each with the seconds since start-up began, then the banner.
        out = server.stdout()
        stages = re.findall(r"^kiln +(\d+\.\d) s  (\w+) ", out, re.M)
        assert [name for _, name in stages] == ["migrating", "seeding", "starting", "ready"]
        seconds = [float(at) for at, _ in stages]
        assert seconds == sorted(seconds) and seconds[-1] > 0
        assert out.index("kiln ") < out.index("Kiln standalone is running")
        assert ready["checks"]["database"]["vendor"] == "sqlite"
        assert (tmp_path / "var" / "kiln.sqlite3").exists()
        assert (tmp_path / "var" / "jwt" / "jwks.json").exists()

        # A token it printed works against the API.
        assert set(server.tokens) == {"engineer", "approver", "auditor", "platform-admin"}
        status, me = server.get_json("/api/v1/me/", token=server.tokens["engineer"])
        assert status == 200
        assert me == {
            "sub": "alice",
            "roles": ["engineer"],
            "teams": ["payments"],
            "authenticated_by": "token",
        }
        status, teams = server.get_json("/api/v1/teams/", token=server.tokens["platform-admin"])
        assert status == 200
        assert {"payments", "search", "data-platform"} <= {t["slug"] for t in teams}
        auditor_claims = server.tokens["auditor"].rsplit(".", 1)[0]
        engineer_signature = server.tokens["engineer"].rsplit(".", 1)[1]
        forged = f"{auditor_claims}.{engineer_signature}"
        status, refused = server.get_json("/api/v1/me/", token=forged)
        assert status == 401 and refused["message"] == "bad signature"

        # Log in through the login page like a browser: GET the form, POST with the CSRF token.
        jar = CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect)
        with opener.open(server.base_url + "/accounts/login/", timeout=10) as page:
            html = page.read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)[1]
        form = urllib.parse.urlencode(
            {
                "username": "alice",
                "password": server.logins["alice"],
                "csrfmiddlewaretoken": csrf,
                "next": "/",
            }
        ).encode()
        try:
            opener.open(server.base_url + "/accounts/login/", data=form, timeout=10)
            raise AssertionError("login did not redirect")
        except urllib.error.HTTPError as redirect:
            assert redirect.code == 302
            assert redirect.headers["Location"] == "/"
        assert "sessionid" in {c.name for c in jar}
        with opener.open(server.base_url + "/", timeout=10) as home:
            body = home.read().decode()
        assert "Welcome, alice" in body
        assert '<span class="badge role">engineer</span>' in body

        # Streamed over uvicorn: a static file (WhiteNoise) and the audit export, whole and
        # without Django's "must consume synchronous iterators" warning (checked below).
        bundle = "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"
        static_url = f"{server.base_url}/static/{bundle}"
        with urllib.request.urlopen(static_url, timeout=10) as static:  # noqa: S310 - our URL
            with open(finders.find(bundle), "rb") as f:
                assert static.read() == f.read()
        export = urllib.request.Request(  # noqa: S310 - our http URL
            server.base_url + "/api/v1/audit/export",
            headers={"Authorization": f"Bearer {server.tokens['auditor']}"},
        )
        with urllib.request.urlopen(export, timeout=10) as response:  # noqa: S310
            lines = response.read().decode().splitlines()
        kinds = [json.loads(line)["type"] for line in lines]
        assert kinds[0] == "header" and "event" in kinds  # the demo seed's events
    finally:
        stopping = time.monotonic()
        code = standalone_process.stop(server, timeout=15)
    assert code == 0, server.stderr()[-3000:]
    assert time.monotonic() - stopping < 10
    assert "Kiln stopped." in server.stdout()
    assert "Traceback" not in server.stderr()
    assert "StreamingHttpResponse" not in server.stderr() + server.stdout()


def test_stage_lines_count_from_when_make_run_began(monkeypatch):
    from kiln.standalone import StageLines

    lines: list[str] = []
    # make run passes the moment it began: 12.5 s before now, so the first stage says 12.5 s.
    monkeypatch.setenv("KILN_RUN_STARTED", str(time.time() - 12.5))
    StageLines(lines.append)("migrating", "database var/kiln.sqlite3")
    at, stage, detail = re.match(r"kiln +(\d+\.\d) s  (\w+) +(.*)$", lines[0]).groups()
    assert 12.5 <= float(at) < 14 and stage == "migrating" and detail == "database var/kiln.sqlite3"
    # Not set (or not a number): the clock starts with the command.
    monkeypatch.setenv("KILN_RUN_STARTED", "soon")
    StageLines(lines.append)("seeding", "demo data")
    assert re.match(r"kiln +0\.\d s  seeding +demo data$", lines[1])
