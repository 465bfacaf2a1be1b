"""Production security posture: DEBUG off, SECRET_KEY required, secure cookies, CSRF, headers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.test import Client

from tests.kiln.pages import csp_problems

ROOT = Path(__file__).resolve().parents[2]


def settings_in_subprocess(env: dict[str, str], code: str) -> subprocess.CompletedProcess:
    """Run `code` after django.setup() with exactly `env` (plus PATH), from the project root."""
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); " + code],
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "DJANGO_SETTINGS_MODULE": "kiln.settings",
            **env,
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


PRODUCTION_ENV = {
    "DATABASE_URL": "postgres://kiln@127.0.0.1:5432/kiln",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "SECRET_KEY": "a-production-secret",
}


def test_outside_standalone_debug_is_off_and_cookies_are_secure(tmp_path):
    env = {**PRODUCTION_ENV, "KILN_VAR_DIR": str(tmp_path)}
    result = settings_in_subprocess(
        env,
        "from django.conf import settings as s; import json; print(json.dumps({"
        "'debug': s.DEBUG, 'standalone': s.STANDALONE, 'session': s.SESSION_COOKIE_SECURE,"
        "'csrf': s.CSRF_COOKIE_SECURE, 'hsts': s.SECURE_HSTS_SECONDS, 'httponly': s.SESSION_COOKIE_HTTPONLY,"
        "'csp': s.CONTENT_SECURITY_POLICY}))",
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["debug"] is False
    assert seen["standalone"] is False
    assert seen["session"] is True and seen["csrf"] is True and seen["httponly"] is True
    assert seen["hsts"] >= 31536000
    assert "script-src 'self'" in seen["csp"] and "unsafe-inline" not in seen["csp"]


def test_debug_is_off_in_this_test_run_too():
    assert django_settings.DEBUG is False
    assert django_settings.STANDALONE is False


def test_missing_secret_key_refuses_to_start(tmp_path):
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "SECRET_KEY"}
    result = settings_in_subprocess({**env, "KILN_VAR_DIR": str(tmp_path)}, "print('started')")
    assert result.returncode != 0
    assert "started" not in result.stdout
    assert "ImproperlyConfigured" in result.stderr
    assert "SECRET_KEY is required outside standalone mode" in result.stderr


def test_standalone_needs_no_secret_key_and_uses_sqlite_under_var(tmp_path):
    result = settings_in_subprocess(
        {"KILN_VAR_DIR": str(tmp_path)},
        "from django.conf import settings as s; print(s.STANDALONE, s.DEBUG, s.DATABASES['default']['NAME'])",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False", str(tmp_path / "kiln.sqlite3")]


@pytest.mark.django_db
def test_session_and_csrf_cookies_are_secure_and_httponly_where_it_matters():
    get_user_model().objects.create_user("alice", password="alice-kiln-demo")
    client = Client()
    page = client.get("/accounts/login/")
    csrf_cookie = page.cookies["csrftoken"]
    assert csrf_cookie["secure"] is True
    assert csrf_cookie["samesite"] == "Lax"
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-kiln-demo"})
    assert response.status_code == 302
    session_cookie = response.cookies["sessionid"]
    assert session_cookie["secure"] is True
    assert session_cookie["httponly"] is True
    assert session_cookie["samesite"] == "Lax"


@pytest.mark.django_db
def test_login_form_enforces_csrf():
    get_user_model().objects.create_user("alice", password="alice-kiln-demo")
    client = Client(enforce_csrf_checks=True)
    refused = client.post("/accounts/login/", {"username": "alice", "password": "alice-kiln-demo"})
    assert refused.status_code == 403
    assert "_auth_user_id" not in client.session

    token = client.get("/accounts/login/").cookies["csrftoken"].value
    accepted = client.post(
        "/accounts/login/",
        {"username": "alice", "password": "alice-kiln-demo", "csrfmiddlewaretoken": token},
    )
    assert accepted.status_code == 302
    assert client.session["_auth_user_id"] == str(get_user_model().objects.get(username="alice").pk)


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/accounts/login/", "/", "/no-such-page/", "/api/v1/"])
def test_security_headers_on_pages(client, path):
    response = client.get(path, secure=True)
    assert response["Content-Security-Policy"] == django_settings.CONTENT_SECURITY_POLICY
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert response["Strict-Transport-Security"].startswith("max-age=31536000")
    assert "camera=()" in response["Permissions-Policy"]


@pytest.mark.django_db
def test_pages_contain_nothing_the_csp_would_block(client):
    user = get_user_model().objects.create_user("alice", password=None)
    pages = {"login": client.get("/accounts/login/"), "404": client.get("/no-such-page/")}
    client.force_login(user)
    pages["home"] = client.get("/")
    pages["docs"] = client.get("/api/docs/")
    for name, response in pages.items():
        assert response["Content-Type"].startswith("text/html"), name
        assert csp_problems(response.content.decode()) == [], name


def test_csp_checker_catches_what_the_policy_forbids():
    html = (
        '<div style="color:red"></div><script>alert(1)</script><style>p{}</style>'
        '<a href="javascript:x()">x</a><button onclick="x()">b</button>'
        '<script src="https://cdn.example/x.js"></script><script src="/static/ok.js"></script>'
    )
    assert len(csp_problems(html)) == 6
