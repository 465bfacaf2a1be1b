"""kiln_token, seed_demo and the token part of standalone's banner."""

from __future__ import annotations

import io
import json
import time
from collections import Counter
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from audit.models import OutboxEvent
from canary import ownership
from canary import seed as canary_seed
from kiln.cluster.simulated import SimulatedBackend
from kiln.identity import keys, tokens
from kiln.identity.models import Membership, Team
from kiln.management.commands.standalone import Command as StandaloneCommand
from tests.support.outside_transactions import OutsideTransactions
from tests.support.serving import serve_in_thread


def verify(token: str, jwks_path) -> dict:
    return tokens.verify(
        token,
        keys.JWKSet(str(jwks_path)),
        tokens.VerifierConfig(issuer="https://kiln.test", audience="kiln-test"),
    )


def run_kiln_token(*args: str) -> str:
    out = io.StringIO()
    call_command("kiln_token", *args, stdout=out)
    return out.getvalue().strip()


def test_kiln_token_prints_a_token_the_api_accepts(jwt_keys):
    token = run_kiln_token(
        "--sub", "alice", "--roles", "engineer,approver", "--team", "payments", "--ttl", "600"
    )
    claims = verify(token, jwt_keys["jwks_path"])
    assert claims["sub"] == "alice"
    assert claims["roles"] == ["engineer", "approver"]
    assert claims["team"] == "payments"
    assert claims["exp"] - claims["iat"] == 600
    assert abs(claims["iat"] - time.time()) < 5


@pytest.mark.django_db
def test_kiln_token_teams_puts_a_teams_list_that_becomes_memberships(jwt_keys):
    from kiln.identity.services import user_from_claims

    for slug in ("payments", "search"):
        Team.objects.create(slug=slug, name=slug)
    token = run_kiln_token(
        "--sub", "dana", "--roles", "engineer", "--teams", "payments, search,payments"
    )
    claims = verify(token, jwt_keys["jwks_path"])
    assert claims["teams"] == ["payments", "search"]  # order kept, the repeat dropped
    assert "team" not in claims
    user = user_from_claims(claims=claims)
    assert sorted(Membership.objects.filter(user=user).values_list("team__slug", flat=True)) == [
        "payments",
        "search",
    ]


def test_kiln_token_without_teams_has_no_teams_claim(jwt_keys):
    token = run_kiln_token("--sub", "erin", "--roles", "engineer", "--team", "payments")
    assert "teams" not in verify(token, jwt_keys["jwks_path"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--roles", "wizard"], "unknown role(s) wizard"),
        (
            ["--roles", "engineer", "--teams", "payments,Not_A_Slug"],
            "Not_A_Slug is not a team slug",
        ),
        (
            ["--roles", "engineer", "--teams", ",".join(f"t{i}" for i in range(101))],
            "at most 100 teams",
        ),
        (["--roles", "engineer", "--ttl", "0"], "ttl must be positive"),
    ],
    ids=["unknown-role", "bad-team-slug", "too-many-teams", "zero-ttl"],
)
def test_kiln_token_refuses_bad_input(args, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_kiln_token("--sub", "alice", *args)


def test_kiln_token_finds_its_kid_in_a_jwks_served_over_http(jwt_keys, settings, tmp_path):
    (tmp_path / "jwks.json").write_text(json.dumps(jwt_keys["jwks"]))
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    )
    serve_in_thread(server)
    try:
        settings.KILN_JWT_JWKS = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        settings.KILN_JWT_KID = None
        token = run_kiln_token("--sub", "svc", "--roles", "engineer")
    finally:
        server.shutdown()
        server.server_close()
    assert json.loads(keys.jwt.utils.base64url_decode(token.split(".")[0]))["kid"] == "test-key-1"
    assert verify(token, jwt_keys["jwks_path"])["sub"] == "svc"


def test_kiln_token_with_a_key_the_jwks_does_not_publish_is_refused(settings, tmp_path):
    other_private, _ = keys.generate_key_pair(tmp_path / "other", kid="other")
    settings.KILN_JWT_PRIVATE_KEY = str(other_private)
    settings.KILN_JWT_KID = None
    with pytest.raises(CommandError, match="no key in the JWKS matches the private key"):
        run_kiln_token("--sub", "alice", "--roles", "engineer")


def banner(settings_seeded: bool = True) -> str:
    out = io.StringIO()
    StandaloneCommand(stdout=out)._print_banner("127.0.0.1", 8123, seeded=settings_seeded)
    return out.getvalue()


def test_standalone_banner_prints_one_verifiable_token_per_role(jwt_keys):
    text = banner()
    lines = [line.split("=", 1) for line in text.splitlines() if "export KILN_TOKEN_" in line]
    assert [line[0].split()[-1] for line in lines] == [
        "KILN_TOKEN_ENGINEER",
        "KILN_TOKEN_APPROVER",
        "KILN_TOKEN_AUDITOR",
        "KILN_TOKEN_PLATFORM_ADMIN",
    ]
    subs = [verify(token, jwt_keys["jwks_path"])["sub"] for _, token in lines]
    assert subs == ["alice", "carol", "erin", "root"]
    # Each line pastes into a shell as printed: it is an export and nothing else.
    assert all(
        line.strip().startswith("export ")
        for line in text.splitlines()
        if "KILN_TOKEN_" in line and "curl" not in line
    )
    assert "alice  alice-kiln-demo" in text


def test_standalone_banner_without_a_signing_key_for_the_given_jwks_prints_no_tokens(
    settings, tmp_path
):
    # KILN_JWT_JWKS given (not the dev keys) and no private key: Kiln still starts.
    settings.KILN_JWT_PRIVATE_KEY = str(tmp_path / "missing.pem")
    text = banner()
    assert "API tokens: none printed (FileNotFoundError" in text
    assert "KILN_TOKEN_" not in text
    assert not (tmp_path / "missing.pem").exists()


@pytest.mark.django_db
def test_seed_demo_creates_people_teams_and_roles_once():
    first = io.StringIO()
    call_command("seed_demo", stdout=first)
    assert first.getvalue().startswith("seeded ")
    User = get_user_model()
    alice = User.objects.get(username="alice")
    assert alice.check_password("alice-kiln-demo")
    assert list(alice.groups.values_list("name", flat=True)) == ["engineer"]
    assert Membership.objects.filter(user=alice, team__slug="payments").exists()
    assert User.objects.get(username="root").is_superuser
    assert User.objects.get(username="carol").is_staff
    assert set(Team.objects.values_list("slug", flat=True)) >= {"payments", "search"}
    seeded = OutboxEvent.objects.filter(action="kiln.demo.seeded")
    assert seeded.count() == 1
    events_before = OutboxEvent.objects.count()
    users_before = User.objects.count()

    again = io.StringIO()
    call_command("seed_demo", stdout=again)
    assert again.getvalue().strip() == "demo data already present; nothing to do"
    assert OutboxEvent.objects.count() == events_before
    assert User.objects.count() == users_before


@pytest.mark.django_db(transaction=True)
def test_seed_demo_asks_the_cluster_outside_every_transaction(monkeypatch):
    calls: Counter[str] = Counter()
    guarded = OutsideTransactions(SimulatedBackend(), calls)
    for module in (canary_seed, ownership):  # who owns a namespace; the demo's Namespaces
        monkeypatch.setattr(module, "get_backend", lambda: guarded)
    call_command("seed_demo", stdout=io.StringIO())
    assert calls["get"] > 0 and calls["apply"] > 0, calls
    assert OutboxEvent.objects.filter(action="kiln.demo.seeded").count() == 1


def test_dev_keys_are_generated_beside_the_default_jwks_once(settings, tmp_path):
    from kiln.identity.signing import ensure_dev_keys

    settings.KILN_JWT_JWKS_IS_DEV = True
    settings.KILN_JWT_JWKS = str(tmp_path / "jwt" / "jwks.json")
    settings.KILN_JWT_PRIVATE_KEY = str(tmp_path / "jwt" / "private.pem")
    settings.KILN_JWT_KID = None
    ensure_dev_keys()
    first = (tmp_path / "jwt" / "private.pem").read_bytes()
    ensure_dev_keys()
    assert (tmp_path / "jwt" / "private.pem").read_bytes() == first  # kept, not regenerated
    token = run_kiln_token("--sub", "alice", "--roles", "engineer")
    assert verify(token, tmp_path / "jwt" / "jwks.json")["sub"] == "alice"


def test_own_private_key_without_a_jwks_is_not_shadowed_by_a_generated_pair(settings, tmp_path):
    from kiln.identity.signing import ensure_dev_keys

    settings.KILN_JWT_JWKS_IS_DEV = True
    settings.KILN_JWT_JWKS = str(tmp_path / "var" / "jwks.json")
    settings.KILN_JWT_PRIVATE_KEY = str(tmp_path / "mine" / "signing.pem")
    ensure_dev_keys()
    assert not (tmp_path / "var").exists() and not (tmp_path / "mine").exists()
