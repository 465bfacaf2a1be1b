"""Bearer JWT verification: every rejection is a 401 with a reason; roles decide 403s."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from audit.models import OutboxEvent
from kiln.identity import keys
from kiln.identity.models import Membership, Team
from tests.support.serving import serve_in_thread

pytestmark = pytest.mark.django_db

ME = "/api/v1/me/"
ISS, AUD = "https://kiln.test", "kiln-test"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims_for(sub: str = "jwt-user", **overrides) -> dict:
    now = int(time.time())
    claims = {
        "iss": ISS,
        "aud": AUD,
        "sub": sub,
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "roles": ["engineer"],
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def sign(jwt_keys, claims: dict, *, kid: str | None = None, key=None) -> str:
    return jwt.encode(
        claims,
        key or jwt_keys["private_key"],
        algorithm="RS256",
        headers={"kid": kid or jwt_keys["kid"]},
    )


def call(token: str, path: str = ME):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.get(path)


def assert_rejected(response, reason: str, sub: str | None = "jwt-user") -> None:
    """A 401 in the error shape, naming `reason`, with a bearer challenge; no user was created."""
    assert response.status_code == 401, response.content
    assert response.json() == {"code": "authentication_failed", "message": reason, "extra": {}}
    challenge = response["WWW-Authenticate"]
    assert challenge.startswith('Bearer realm="kiln"')
    assert f'error_description="{reason}"' in challenge
    if sub:
        assert not get_user_model().objects.filter(username=sub).exists()
        assert not OutboxEvent.objects.filter(action="kiln.user.created", data__sub=sub).exists()


# --- each rejection is a 401 with its reason ------------------------------------------


def test_alg_none_is_rejected(jwt_keys):
    header = b64(json.dumps({"alg": "none", "typ": "JWT", "kid": jwt_keys["kid"]}).encode())
    payload = b64(json.dumps(claims_for()).encode())
    assert_rejected(call(f"{header}.{payload}."), "algorithm not allowed")


def test_hs256_signed_with_the_public_key_pem_is_rejected(jwt_keys):
    # The classic key-confusion attack: the RSA public key used as an HMAC secret.
    public_pem = (
        jwt_keys["private_key"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": jwt_keys["kid"]}).encode())
    payload = b64(json.dumps(claims_for(roles=["platform-admin"])).encode())
    signature = hmac.new(public_pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    assert_rejected(call(f"{header}.{payload}.{b64(signature)}"), "algorithm not allowed")


def test_expired_token_is_rejected(jwt_keys):
    now = int(time.time())
    token = sign(jwt_keys, claims_for(iat=now - 3600, nbf=now - 3600, exp=now - 600))
    assert_rejected(call(token), "token expired")


def test_nbf_in_the_future_is_rejected(jwt_keys):
    token = sign(jwt_keys, claims_for(nbf=int(time.time()) + 600))
    assert_rejected(call(token), "token not yet valid")


def test_iat_in_the_future_is_rejected(jwt_keys):
    now = int(time.time())
    token = sign(jwt_keys, claims_for(iat=now + 600, nbf=now))
    assert_rejected(call(token), "token not yet valid")


def test_wrong_issuer_is_rejected(jwt_keys):
    assert_rejected(call(sign(jwt_keys, claims_for(iss="https://evil.example"))), "wrong issuer")


def test_wrong_audience_is_rejected(jwt_keys):
    assert_rejected(call(sign(jwt_keys, claims_for(aud="another-api"))), "wrong audience")


def test_unknown_kid_is_rejected(jwt_keys, tmp_path):
    # Signed by a key the JWKS does not publish, under a kid it does not know.
    _, other_private = _second_key(tmp_path, "stranger")
    token = sign(jwt_keys, claims_for(), kid="stranger", key=other_private)
    assert_rejected(call(token), "unknown key id")


def test_token_without_kid_is_rejected(jwt_keys):
    token = jwt.encode(claims_for(), jwt_keys["private_key"], algorithm="RS256")
    assert_rejected(call(token), "token has no key id")


def test_known_kid_with_another_keys_signature_is_rejected(jwt_keys, tmp_path):
    _, other_private = _second_key(tmp_path, "other")
    token = sign(jwt_keys, claims_for(), kid=jwt_keys["kid"], key=other_private)
    assert_rejected(call(token), "bad signature")


def test_missing_sub_is_rejected(jwt_keys):
    assert_rejected(call(sign(jwt_keys, claims_for(sub=None))), "missing claim: sub", sub=None)


def test_blank_sub_is_rejected(jwt_keys):
    assert_rejected(call(sign(jwt_keys, claims_for(sub="  "))), "missing claim: sub", sub="  ")


def test_overlong_sub_is_rejected_not_truncated(jwt_keys):
    sub = "a" * 151
    assert_rejected(call(sign(jwt_keys, claims_for(sub=sub))), "sub too long", sub=sub[:150])


@pytest.mark.parametrize("claim", ["exp", "iat", "aud", "iss"])
def test_each_required_claim_missing_is_rejected(jwt_keys, claim):
    token = sign(jwt_keys, claims_for(**{claim: None}))
    assert_rejected(call(token), f"missing claim: {claim}")


def test_payload_altered_after_signing_is_rejected(jwt_keys):
    header, _, signature = sign(jwt_keys, claims_for()).split(".")
    forged = b64(json.dumps(claims_for(roles=["platform-admin"])).encode())
    assert_rejected(call(f"{header}.{forged}.{signature}"), "bad signature")


@pytest.mark.parametrize(
    "garbage", ["garbage", "a.b.c", "eyJhbGciOiJSUzI1NiJ9.e30", "...."], ids=str
)
def test_garbage_token_is_rejected(garbage):
    assert_rejected(call(garbage), "malformed token", sub=None)


def test_malformed_authorization_header_is_rejected():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer two parts")
    assert_rejected(client.get(ME), "malformed Authorization header", sub=None)


def test_no_credentials_is_401_not_authenticated_with_a_challenge():
    response = APIClient().get(ME)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == 'Bearer realm="kiln"'


def test_deactivated_user_is_rejected(make_token):
    get_user_model().objects.create(username="gone", is_active=False)
    response = call(make_token(sub="gone"))
    assert response.status_code == 401
    assert response.json()["message"] == "user is deactivated"


# --- leeway ----------------------------------------------------------------------------


def test_leeway_accepts_a_token_expired_within_it(jwt_keys, settings):
    settings.KILN_JWT_LEEWAY_SECONDS = 20  # wide, so a slow request stays within it
    now = int(time.time())
    token = sign(jwt_keys, claims_for(iat=now - 600, nbf=now - 600, exp=now - 2))
    assert call(token).status_code == 200


def test_leeway_rejects_a_token_expired_beyond_it(jwt_keys, settings):
    settings.KILN_JWT_LEEWAY_SECONDS = 10
    now = int(time.time())
    token = sign(jwt_keys, claims_for(iat=now - 600, nbf=now - 600, exp=now - 20))
    assert_rejected(call(token), "token expired")


def test_leeway_is_capped_at_30_seconds_whatever_is_configured(jwt_keys, settings):
    settings.KILN_JWT_LEEWAY_SECONDS = 600
    now = int(time.time())
    within = sign(jwt_keys, claims_for(sub="w", iat=now - 600, nbf=now - 600, exp=now - 12))
    beyond = sign(jwt_keys, claims_for(iat=now - 600, nbf=now - 600, exp=now - 45))
    assert call(within).status_code == 200
    assert_rejected(call(beyond), "token expired")


def test_leeway_setting_read_from_the_environment_is_capped(monkeypatch):
    import subprocess
    import sys

    env = {"KILN_JWT_LEEWAY_SECONDS": "300", "SECRET_KEY": "x", "PATH": "/usr/bin:/bin"}
    env["DATABASE_URL"] = "postgres://nobody@127.0.0.1:1/none"
    env["REDIS_URL"] = "redis://127.0.0.1:1/0"  # outside standalone Redis is required
    out = subprocess.run(
        [sys.executable, "-c", "import kiln.settings as s; print(s.KILN_JWT_LEEWAY_SECONDS)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.strip() == "30"


# --- key rotation and JWKS sources -----------------------------------------------------


def _second_key(tmp_path, kid: str):
    directory = tmp_path / kid
    private_path, jwks_path = keys.generate_key_pair(directory, kid=kid)
    return json.loads(jwks_path.read_text())["keys"][0], keys.load_private_key(private_path)


def test_rotation_both_kids_in_the_jwks_verify(jwt_keys, settings, tmp_path):
    new_jwk, new_private = _second_key(tmp_path, "test-key-2")
    jwks_file = tmp_path / "rotating.json"
    jwks_file.write_text(json.dumps({"keys": [*jwt_keys["jwks"]["keys"], new_jwk]}))
    settings.KILN_JWT_JWKS = str(jwks_file)

    new = call(sign(jwt_keys, claims_for(sub="new"), kid="test-key-2", key=new_private))
    old = call(sign(jwt_keys, claims_for(sub="old")))
    assert new.status_code == 200 and new.json()["sub"] == "new"
    assert old.status_code == 200 and old.json()["sub"] == "old"


def test_kid_published_after_the_cache_was_filled_is_picked_up(
    jwt_keys, settings, tmp_path, monkeypatch
):
    jwks_file = tmp_path / "live.json"
    jwks_file.write_text(json.dumps(jwt_keys["jwks"]))
    settings.KILN_JWT_JWKS = str(jwks_file)
    settings.KILN_JWT_JWKS_CACHE_SECONDS = 3600
    assert call(sign(jwt_keys, claims_for(sub="first"))).status_code == 200  # cache filled

    new_jwk, new_private = _second_key(tmp_path, "test-key-3")
    jwks_file.write_text(json.dumps({"keys": [*jwt_keys["jwks"]["keys"], new_jwk]}))
    token = sign(jwt_keys, claims_for(sub="rotated"), kid="test-key-3", key=new_private)

    # An unknown kid refetches at most once per MIN_REFETCH_SECONDS; inside that window it
    # stays unknown, after it the new key is read without waiting for the cache to expire.
    assert_rejected(call(token), "unknown key id", sub="rotated")
    monkeypatch.setattr(keys, "MIN_REFETCH_SECONDS", 0.0)
    response = call(token)
    assert response.status_code == 200, response.content
    assert response.json()["sub"] == "rotated"


def test_jwks_served_over_http(jwt_keys, settings, tmp_path):
    (tmp_path / "jwks.json").write_text(json.dumps(jwt_keys["jwks"]))
    requests: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            requests.append(self.path)

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(tmp_path)))
    thread = serve_in_thread(server, start=False)
    thread.start()
    try:
        settings.KILN_JWT_JWKS = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        first = call(sign(jwt_keys, claims_for(sub="over-http")))
        second = call(sign(jwt_keys, claims_for(sub="over-http")))
    finally:
        server.shutdown()
        server.server_close()
    assert first.status_code == 200, first.content
    assert second.status_code == 200
    assert requests == ["/jwks.json"]  # fetched once, then cached


def test_unreachable_jwks_fails_closed(jwt_keys, settings):
    settings.KILN_JWT_JWKS = "http://127.0.0.1:1/jwks.json"
    assert_rejected(call(sign(jwt_keys, claims_for())), "signing keys unavailable")


def test_jwks_cache_keeps_last_keys_when_the_source_breaks(jwt_keys, tmp_path):
    source = tmp_path / "flaky.json"
    source.write_text(json.dumps(jwt_keys["jwks"]))
    jwks = keys.JWKSet(str(source), cache_seconds=0)
    assert jwks.get(jwt_keys["kid"]) is not None
    source.write_text("{not json")
    time.sleep(0.01)
    jwks._attempted_at -= keys.MIN_REFETCH_SECONDS  # let the next lookup retry at once
    assert jwks.get(jwt_keys["kid"]) is not None  # stale keys still verify
    assert jwks._failed is True


# --- first sight of a sub, roles ---------------------------------------------------------


def test_user_created_on_first_sight_with_membership_and_audit(make_token):
    team = Team.objects.create(slug="payments", name="Payments")
    response = call(make_token(sub="newcomer", roles=["engineer"], team="payments"))
    assert response.status_code == 200
    assert response.json() == {
        "sub": "newcomer",
        "roles": ["engineer"],
        "teams": ["payments"],
        "authenticated_by": "token",
    }
    user = get_user_model().objects.get(username="newcomer")
    assert not user.has_usable_password()
    assert Membership.objects.filter(user=user, team=team).exists()
    created = OutboxEvent.objects.get(action="kiln.user.created")
    assert created.actor == "system:identity"
    assert created.target == f"auth.user:{user.pk}"
    assert created.data["sub"] == "newcomer"
    joined = OutboxEvent.objects.get(action="kiln.membership.created")
    assert joined.data == {"user": "newcomer", "team": "payments", "via": "jwt"}

    call(make_token(sub="newcomer", roles=["engineer"], team="payments"))  # second sight
    assert get_user_model().objects.filter(username="newcomer").count() == 1
    assert OutboxEvent.objects.filter(action__startswith="kiln.").count() == 2


def test_team_claim_for_an_unknown_team_creates_no_membership(make_token):
    response = call(make_token(sub="drifter", team="no-such-team"))
    assert response.status_code == 200
    assert response.json()["teams"] == []
    assert not Membership.objects.exists()


def test_unknown_roles_in_the_claim_are_ignored(jwt_keys):
    response = call(sign(jwt_keys, claims_for(roles=["engineer", "god"])))
    assert response.json()["roles"] == ["engineer"]


def test_valid_token_without_the_needed_role_is_403(make_token):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(sub='eve', roles=['engineer'])}")
    response = client.post("/api/v1/teams/", {"slug": "eve-team", "name": "Eve"}, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"
    assert not Team.objects.filter(slug="eve-team").exists()
