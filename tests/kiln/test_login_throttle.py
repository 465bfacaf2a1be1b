"""Login throttling: failures limited per username and per client address, lockouts audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from audit.models import OutboxEvent
from kiln.identity import throttle

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
PASSWORD = "carol-kiln-demo"
LIMIT = 3


@pytest.fixture(autouse=True)
def _throttle(settings):
    settings.KILN_LOGIN_FAILURE_LIMIT = LIMIT
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.KILN_LOGIN_COOLOFF_MINUTES = 15.0
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


@pytest.fixture
def carol():
    return get_user_model().objects.create_user("carol", password=PASSWORD)


def login(username: str, password: str, address: str = "10.0.0.1", **extra):
    return Client(REMOTE_ADDR=address, **extra).post(
        LOGIN, {"username": username, "password": password}
    )


def signed_in(response) -> bool:
    return response.status_code == 302 and response.wsgi_request.user.is_authenticated


def lockouts() -> list[dict]:
    return [e.data for e in OutboxEvent.objects.filter(action="kiln.login.locked_out")]


def assert_locked_page(response) -> None:
    html = response.content.decode()
    assert response.status_code == 429
    assert "Too many failed sign-ins" in html and "15 minutes" in html
    assert "That username and password do not match." not in html
    assert 'name="password"' in html  # the sign-in page, not a bare error
    assert response["Retry-After"] == "900"
    assert "Traceback" not in html


def pass_the_cooloff(minutes: float = 16) -> None:
    """Age every counted failure as if `minutes` had gone by."""
    from axes.models import AccessAttempt

    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=minutes))


def test_failures_for_one_username_from_many_addresses_lock_that_username(carol):
    for i in range(LIMIT - 1):
        assert login("carol", "wrong", f"10.0.1.{i}").status_code == 200
    assert lockouts() == []
    assert_locked_page(login("carol", "wrong", "10.0.1.99"))
    # locked wherever the attempt comes from, the right password too
    assert_locked_page(login("carol", PASSWORD, "10.0.2.1"))
    # other people from those addresses are not affected
    get_user_model().objects.create_user("dave", password="dave-kiln-demo")
    assert signed_in(login("dave", "dave-kiln-demo", "10.0.1.0"))


def test_failures_from_one_address_over_many_usernames_lock_that_address(carol):
    for i in range(LIMIT - 1):
        assert login(f"guess-{i}", "wrong", "10.9.9.9").status_code == 200
    assert_locked_page(login("guess-last", "wrong", "10.9.9.9"))
    # carol's right password from the locked address is refused ...
    assert_locked_page(login("carol", PASSWORD, "10.9.9.9"))
    # ... and works from anywhere else: her username has no failures
    assert signed_in(login("carol", PASSWORD, "10.0.0.2"))


def test_a_lockout_is_audited_once_with_who_and_where(carol):
    for _ in range(LIMIT):
        login("carol", "wrong", "10.0.3.3")
    for _ in range(3):
        assert_locked_page(login("carol", PASSWORD, "10.0.3.3"))  # refusals while locked
    assert lockouts() == [
        {
            "username": "carol",
            "ip_address": "10.0.3.3",
            "failures": LIMIT,
            "limit": LIMIT,
            "cooloff_minutes": 15.0,
        }
    ]
    event = OutboxEvent.objects.get(action="kiln.login.locked_out")
    assert event.actor == "system:identity" and event.target == "kiln.login:carol"


def test_after_the_cooloff_the_right_password_signs_in(carol):
    for _ in range(LIMIT):
        login("carol", "wrong")
    assert_locked_page(login("carol", PASSWORD))
    pass_the_cooloff(minutes=10)
    assert_locked_page(login("carol", PASSWORD))  # not yet
    pass_the_cooloff(minutes=16)
    assert signed_in(login("carol", PASSWORD))


def test_successful_logins_are_never_throttled(carol):
    for _ in range(LIMIT * 4):
        assert signed_in(login("carol", PASSWORD))
    assert lockouts() == []


def test_fewer_failures_than_the_limit_still_sign_in(carol):
    for _ in range(LIMIT - 1):
        assert login("carol", "wrong").status_code == 200
    response = login("carol", PASSWORD)
    assert signed_in(response)


def test_bearer_tokens_are_not_throttled_by_a_locked_username(carol, make_token):
    from rest_framework.test import APIClient

    for _ in range(LIMIT):
        login("carol", "wrong", "127.0.0.1")
    assert_locked_page(login("carol", PASSWORD, "127.0.0.1"))
    client = APIClient(REMOTE_ADDR="127.0.0.1")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(sub='carol')}")
    response = client.get("/api/v1/me/")
    assert response.status_code == 200 and response.json()["sub"] == "carol"


def test_the_admin_login_is_throttled_with_the_same_page(carol):
    for _ in range(LIMIT):
        Client(REMOTE_ADDR="10.0.4.4").post(
            "/admin/login/", {"username": "carol", "password": "wrong"}
        )
    response = Client(REMOTE_ADDR="10.0.4.4").post(
        "/admin/login/", {"username": "carol", "password": PASSWORD}
    )
    assert_locked_page(response)


def test_client_address_is_remote_addr_unless_proxies_are_declared(rf, settings):
    request = rf.get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.7")
    settings.KILN_LOGIN_PROXY_HOPS = 0
    assert throttle.client_address(request) == "10.1.1.1"  # a forwarded header is a claim
    settings.KILN_LOGIN_PROXY_HOPS = 1
    assert throttle.client_address(request) == "203.0.113.7"  # what our proxy saw
    settings.KILN_LOGIN_PROXY_HOPS = 3
    assert throttle.client_address(request) == "10.1.1.1"  # fewer entries than proxies


def test_the_lockout_message_names_the_cooloff(settings):
    settings.KILN_LOGIN_COOLOFF_MINUTES = 1.0
    assert "paused for 1 minute;" in throttle.lockout_message()
    settings.KILN_LOGIN_COOLOFF_MINUTES = 2.5
    assert "paused for 2.5 minutes;" in throttle.lockout_message()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("KILN_LOGIN_FAILURE_LIMIT", "0", "KILN_LOGIN_FAILURE_LIMIT must be at least 1"),
        ("KILN_LOGIN_COOLOFF_MINUTES", "0", "KILN_LOGIN_COOLOFF_MINUTES must be above 0"),
        ("KILN_LOGIN_FAILURE_LIMIT", "many", "KILN_LOGIN_FAILURE_LIMIT must be an integer"),
    ],
)
def test_bad_throttle_settings_refuse_to_start(variable, value, message, tmp_path):
    import os
    import subprocess
    import sys

    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")
    } | {variable: value, "KILN_VAR_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", "import kiln.settings"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert message in result.stderr
