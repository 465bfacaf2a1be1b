"""Login throttling: failures limited per (username, client address) pair and, higher, per
address over every username; the client address believes trusted proxies only; lockouts audited."""

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
ADDRESS_LIMIT = 7


@pytest.fixture(autouse=True)
def _throttle(settings):
    settings.KILN_LOGIN_FAILURE_LIMIT = LIMIT
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.KILN_LOGIN_ADDRESS_FAILURE_LIMIT = ADDRESS_LIMIT
    settings.KILN_TRUSTED_PROXIES = ()
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


def assert_locked_page(response, scope: str = "account") -> None:
    html = response.content.decode()
    assert response.status_code == 429
    assert "Too many failed sign-ins" in html and "paused for 15 minutes" in html
    assert "ask a platform admin to lift the lock sooner" in html
    assert "manage.py login_unlock" in html
    if scope == "account":
        assert "for this account from your network address" in html
    else:
        assert "from your network address, over several accounts" in html
    assert "That username and password do not match." not in html
    assert 'name="password"' in html  # the sign-in page, not a bare error
    assert response["Retry-After"] == "900"
    assert "Traceback" not in html


def pass_the_cooloff(minutes: float = 16) -> None:
    """Age every counted failure as if `minutes` had gone by."""
    from axes.models import AccessAttempt

    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=minutes))


def test_failures_for_one_username_from_one_address_lock_only_that_pair(carol):
    for _ in range(LIMIT - 1):
        assert login("carol", "wrong", "10.0.1.1").status_code == 200
    assert lockouts() == []
    assert_locked_page(login("carol", "wrong", "10.0.1.1"))
    # locked from that address, the right password too ...
    assert_locked_page(login("carol", PASSWORD, "10.0.1.1"))
    # ... but carol from anywhere else is not: nobody else's address can lock her out
    assert signed_in(login("carol", PASSWORD, "10.0.2.1"))


def test_one_persons_typos_do_not_lock_a_colleague_behind_the_same_address(carol):
    get_user_model().objects.create_user("dave", password="dave-kiln-demo")
    office = "192.0.2.10"  # one NAT address for the whole office
    for _ in range(LIMIT):
        login("carol", "wrong", office)
    assert_locked_page(login("carol", PASSWORD, office))
    assert signed_in(login("dave", "dave-kiln-demo", office))


def test_root_is_not_exempt_and_not_locked_out_by_someone_elses_address():
    get_user_model().objects.create_superuser("root", password="root-kiln-demo-pw")
    for _ in range(LIMIT):  # someone guessing root's password from their own address
        login("root", "wrong", "198.51.100.66")
    assert_locked_page(login("root", "root-kiln-demo-pw", "198.51.100.66"))  # no exemption
    assert signed_in(login("root", "root-kiln-demo-pw", "10.0.0.7"))  # root at their desk


def test_spraying_many_usernames_from_one_address_locks_that_address(carol):
    # LIMIT - 1 guesses per name stays under the pair lock; the address total does not
    guesses = 0
    for i in range(ADDRESS_LIMIT):
        for _ in range(LIMIT - 1):
            if guesses == ADDRESS_LIMIT - 1:
                break
            assert login(f"guess-{i}", "wrong", "10.9.9.9").status_code == 200
            guesses += 1
    assert lockouts() == []
    assert_locked_page(login("guess-last", "wrong", "10.9.9.9"), scope="address")
    # carol's right password from the locked address is refused ...
    assert_locked_page(login("carol", PASSWORD, "10.9.9.9"), scope="address")
    # ... and works from anywhere else
    assert signed_in(login("carol", PASSWORD, "10.0.0.2"))
    [event] = lockouts()
    assert event["scope"] == "address" and event["ip_address"] == "10.9.9.9"
    assert event["failures"] == ADDRESS_LIMIT and event["limit"] == ADDRESS_LIMIT


def test_a_client_rotating_x_forwarded_for_is_one_address_when_no_proxy_is_trusted(carol):
    for i in range(ADDRESS_LIMIT - 1):
        login(f"user-{i}", "wrong", "10.7.7.7", HTTP_X_FORWARDED_FOR=f"203.0.113.{i}")
    assert_locked_page(
        login("user-x", "wrong", "10.7.7.7", HTTP_X_FORWARDED_FOR="203.0.113.200"),
        scope="address",
    )


def test_a_trusted_proxys_forwarded_address_is_the_client(carol, settings):
    from kiln import proxies

    settings.KILN_TRUSTED_PROXIES = proxies.parse_trusted_proxies("10.8.0.0/16")
    for _ in range(LIMIT):
        login("carol", "wrong", "10.8.0.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.9")
    assert_locked_page(
        login("carol", PASSWORD, "10.8.0.2", HTTP_X_FORWARDED_FOR="203.0.113.9")
    )
    # carol behind the same proxy, from her own address, is not locked
    assert signed_in(login("carol", PASSWORD, "10.8.0.1", HTTP_X_FORWARDED_FOR="203.0.113.10"))
    from axes.models import AccessAttempt

    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.9"}


def test_a_lockout_is_audited_once_with_who_and_where(carol):
    for _ in range(LIMIT):
        login("carol", "wrong", "10.0.3.3")
    for _ in range(3):
        assert_locked_page(login("carol", PASSWORD, "10.0.3.3"))  # refusals while locked
    assert lockouts() == [
        {
            "username": "carol",
            "ip_address": "10.0.3.3",
            "scope": "account",
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


def test_client_address_believes_forwarded_headers_from_trusted_proxies_only(rf, settings):
    from kiln import proxies

    request = rf.get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.7")
    settings.KILN_TRUSTED_PROXIES = ()
    assert throttle.client_address(request) == "10.1.1.1"  # a forwarded header is a claim
    settings.KILN_TRUSTED_PROXIES = proxies.parse_trusted_proxies("10.1.1.1")
    assert throttle.client_address(request) == "203.0.113.7"  # what our proxy saw
    settings.KILN_TRUSTED_PROXIES = proxies.parse_trusted_proxies("10.1.1.0/24, 203.0.113.7")
    assert throttle.client_address(request) == "6.6.6.6"  # two proxies of ours in a row


def test_the_lockout_message_names_the_cooloff_and_who_can_lift_it(settings):
    settings.KILN_LOGIN_COOLOFF_MINUTES = 1.0
    message = throttle.lockout_message()
    assert "paused for 1 minute " in message and "this one from elsewhere" in message
    assert "ask a platform admin to lift the lock sooner (manage.py login_unlock)" in message
    settings.KILN_LOGIN_COOLOFF_MINUTES = 2.5
    assert "paused for 2.5 minutes;" in throttle.lockout_message(throttle.SCOPE_ADDRESS)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("KILN_LOGIN_FAILURE_LIMIT", "0", "KILN_LOGIN_FAILURE_LIMIT must be at least 1"),
        ("KILN_LOGIN_COOLOFF_MINUTES", "0", "KILN_LOGIN_COOLOFF_MINUTES must be above 0"),
        ("KILN_LOGIN_FAILURE_LIMIT", "many", "KILN_LOGIN_FAILURE_LIMIT must be an integer"),
        ("KILN_LOGIN_ADDRESS_FAILURE_LIMIT", "2", "must be at least KILN_LOGIN_FAILURE_LIMIT"),
        ("KILN_TRUSTED_PROXIES", "10.0.0.1, proxy.local", "'proxy.local' is not an IP address"),
        ("KILN_LOGIN_PROXY_HOPS", "1", "list your proxies' addresses in KILN_TRUSTED_PROXIES"),
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


def test_login_unlock_lifts_a_lock_early_and_is_audited(carol):
    from django.core.management import CommandError, call_command

    for _ in range(LIMIT):
        login("carol", "wrong", "10.0.5.5")
    assert_locked_page(login("carol", PASSWORD, "10.0.5.5"))
    with pytest.raises(CommandError, match="name a username"):
        call_command("login_unlock")
    with pytest.raises(CommandError, match="is not an IP address"):
        call_command("login_unlock", "carol", address="10.0.5")
    call_command("login_unlock", "carol", address="10.0.5.5")
    assert signed_in(login("carol", PASSWORD, "10.0.5.5"))
    [event] = OutboxEvent.objects.filter(action="kiln.login.unlocked")
    assert event.actor == "system:identity" and event.target == "kiln.login:carol"
    assert event.data["username"] == "carol" and event.data["ip_address"] == "10.0.5.5"
    assert event.data["counters"] == 1 and event.data["via"].startswith("manage.py login_unlock")
    call_command("login_unlock", all=True)  # nothing left to lift: records nothing
    assert OutboxEvent.objects.filter(action="kiln.login.unlocked").count() == 1
