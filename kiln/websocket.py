"""Websockets: the origin check on every handshake, and streams that re-check who is listening.

Origin. A browser sends its page's origin with every handshake, and the session cookie rides
along whatever the page, so a handshake is accepted only from Kiln's own origin, the scheme,
host and port the socket was opened on (`ws` pairs with `http`, `wss` with `https`), or from an
origin listed in `CSRF_TRUSTED_ORIGINS`: the rule Django's CSRF check applies to a form post.
A page on another port of the same host is another origin (RFC 6454) and is refused.

Streams. `AuthorisedStream` admits a caller as an HTTP request would (a bearer token in
`?token=`, or the session) and then keeps asking, every `KILN_WS_RECHECK_SECONDS` and at the
token's `exp`, whether that caller is still signed in and may still see what it streams. When
the answer changes the socket is closed with a code saying why:

- 4401: the credentials ended: the token's `exp` passed, the session was signed out or its
  password changed, the user was deactivated or removed;
- 4403: access was lost (or never held): no Kiln role any more, no longer a member of the
  team, the object hidden; a handshake refused for any reason is closed with 4403 as well;
- 1011: the re-check itself kept failing (the database unreachable) for
  RECHECK_FAILURE_GRACE_SECONDS; reconnecting retries it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs, urlsplit

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.http.request import split_domain_port, validate_host
from django.utils.crypto import constant_time_compare

from kiln.identity.authentication import verify_bearer
from kiln.identity.permissions import Actor, actor_for_user, has_any_role
from kiln.identity.services import user_from_claims
from kiln.identity.tokens import TokenRejected

log = logging.getLogger("kiln.websocket")

CLOSE_CREDENTIALS_ENDED = 4401
CLOSE_ACCESS_LOST = 4403
CLOSE_RECHECK_FAILED = 1011
# How long a re-check may keep failing (the database unreachable) before the stream closes.
RECHECK_FAILURE_GRACE_SECONDS = 30.0

_DEFAULT_PORTS = {"http": 80, "https": 443}


# --- origin -------------------------------------------------------------------


def _origin_triple(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin such as `https://kiln.example:8443`, or None."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host or parts.path not in ("", "/"):
        return None
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _is_secure(scope: dict[str, Any]) -> bool:
    """Whether the socket was opened over TLS, as Django's request.is_secure() decides it."""
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        name, value = proxy
        header = name.removeprefix("HTTP_").lower().replace("_", "-").encode()
        seen = _header(scope, header)
        if seen is not None:
            return seen.split(",", 1)[0].strip() == value
    return scope.get("scheme", "ws") in ("wss", "https")


def own_origin(scope: dict[str, Any]) -> tuple[str, str, int] | None:
    """The (scheme, host, port) the socket was opened on, from its Host header; None when the
    host is missing or not in ALLOWED_HOSTS."""
    host = _header(scope, b"host")
    if not host:
        return None
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    return _origin_triple(f"{'https' if _is_secure(scope) else 'http'}://{host}")


def _trusted(origin: tuple[str, str, int]) -> bool:
    """Whether CSRF_TRUSTED_ORIGINS lists the origin (`https://*.example.com` for subdomains)."""
    scheme, host, port = origin
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        wildcard = "://*." in entry
        trusted = _origin_triple(entry.replace("://*.", "://", 1) if wildcard else entry)
        if trusted is None or trusted[0] != scheme or trusted[2] != port:
            continue
        if host == trusted[1] or (wildcard and host.endswith("." + trusted[1])):
            return True
    return False


def origin_allowed(scope: dict[str, Any]) -> bool:
    """True when the handshake's Origin is the socket's own origin (scheme, host and port) or a
    trusted one; a handshake without an Origin is refused."""
    origin = _header(scope, b"origin")
    seen = _origin_triple(origin) if origin else None
    if seen is None:
        return False
    own = own_origin(scope)
    return (own is not None and seen == own) or _trusted(seen)


class SameOriginValidator:
    """ASGI middleware for websockets: a handshake from any other origin is refused (403)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)


# --- streams that re-check ------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    """What admitted a socket: the user, and either a token's verified claims or a session."""

    user_id: int
    claims: dict[str, Any] | None = None
    session_key: str | None = None

    @property
    def expires_at(self) -> float | None:
        """The token's `exp` (epoch seconds); a session has none of its own."""
        return float(self.claims["exp"]) if self.claims is not None else None


def _session_user(session_key: str) -> Any | None:
    """The active user a stored session still signs in, read-only (nothing is cycled or
    flushed: that is the next HTTP request's business); None once it no longer does."""
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user_id, backend_path = store.get(SESSION_KEY), store.get(BACKEND_SESSION_KEY)
    if user_id is None or backend_path not in settings.AUTHENTICATION_BACKENDS:
        return None
    user = load_backend(backend_path).get_user(get_user_model()._meta.pk.to_python(user_id))
    session_hash = store.get(HASH_SESSION_KEY) or ""
    if user is None or not session_hash:
        return None
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    return user if any(constant_time_compare(session_hash, h) for h in hashes) else None


class AuthorisedStream(AsyncJsonWebsocketConsumer):
    """A websocket consumer that admits a caller as HTTP would and closes once it may no longer
    listen (the module docstring lists the close codes).

    A subclass says what the caller must be allowed (`authorise`, run in a database thread at
    the handshake and at every re-check) and what to do once the socket is open (`opened`).
    """

    def authorise(self, actor: Actor) -> bool:
        """Whether `actor` (holding a Kiln role) may follow this stream; False closes it."""
        raise NotImplementedError

    async def opened(self) -> None:
        """Called once the socket is accepted."""

    async def closed(self) -> None:
        """Called when the socket goes, whoever closed it."""

    async def connect(self) -> None:
        """Admit the caller, accept, then watch the credentials and access while open."""
        self.credentials: Credentials | None = await database_sync_to_async(self._admit)()
        if self.credentials is None:
            await self.close(code=CLOSE_ACCESS_LOST)
            return
        await self.accept()
        await self.opened()
        self._watcher = asyncio.ensure_future(self._watch())

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None,
                      **kwargs: Any) -> None:  # fmt: skip
        """Ignore what the client sends: these streams only send. (Decoded as JSON, a frame that
        is not JSON raised in the consumer, which then never disconnected, and its re-check and
        render tasks ran on with nobody listening.)"""

    async def disconnect(self, code: int) -> None:
        """Stop watching and let the subclass clean up."""
        watcher = getattr(self, "_watcher", None)
        if watcher is not None:
            watcher.cancel()
        if getattr(self, "credentials", None) is not None:
            await self.closed()

    def _admit(self) -> Credentials | None:
        token = (parse_qs(self.scope.get("query_string", b"").decode()).get("token") or [None])[0]
        if token:
            try:
                claims = verify_bearer(token)
            except TokenRejected:
                return None
            user = user_from_claims(claims=claims)
            credentials = Credentials(user_id=user.pk, claims=claims)
            if not user.is_active or time.time() >= (credentials.expires_at or 0):
                return None
            actor = actor_for_user(user, claims)
        else:
            user = self.scope.get("user")
            session = self.scope.get("session")
            if user is None or not user.is_authenticated or session is None:
                return None
            credentials = Credentials(user_id=user.pk, session_key=session.session_key)
            actor = actor_for_user(user)
        return credentials if has_any_role(actor) and self.authorise(actor) else None

    def _recheck(self) -> int | None:
        """The close code if the caller may no longer listen, else None (run in a DB thread)."""
        credentials = self.credentials
        assert credentials is not None
        if credentials.session_key is not None:
            user = _session_user(credentials.session_key)
            if user is None or user.pk != credentials.user_id:
                return CLOSE_CREDENTIALS_ENDED
        else:
            user = get_user_model().objects.filter(pk=credentials.user_id).first()
        if user is None or not user.is_active:
            return CLOSE_CREDENTIALS_ENDED
        # Memberships as stored now: a token's team claims were reconciled at the handshake,
        # and one removed since is gone until the next authentication claims it again.
        actor = actor_for_user(user, credentials.claims)
        if not has_any_role(actor) or not self.authorise(actor):
            return CLOSE_ACCESS_LOST
        return None

    def _next_wait(self) -> float:
        wait = float(settings.KILN_WS_RECHECK_SECONDS)
        expires_at = self.credentials.expires_at if self.credentials else None
        if expires_at is not None:
            wait = min(wait, max(0.0, expires_at - time.time()))
        return wait

    async def _watch(self) -> None:
        """Re-check every KILN_WS_RECHECK_SECONDS, and at the token's exp; close when it fails.

        A re-check that cannot run (the database restarting) is tried again at the next
        interval: every revocation it would see is stored in that database, so none is missed
        meanwhile, and the token's exp needs no database. After RECHECK_FAILURE_GRACE_SECONDS
        of failures the stream closes with 1011 all the same.
        """
        failing_since: float | None = None
        while True:
            await asyncio.sleep(self._next_wait())
            expires_at = self.credentials.expires_at if self.credentials else None
            if expires_at is not None and time.time() >= expires_at:
                code: int | None = CLOSE_CREDENTIALS_ENDED
            else:
                try:
                    code = await database_sync_to_async(self._recheck)()
                    failing_since = None
                except Exception:  # noqa: BLE001 - retried, then the stream closes; logged
                    now = time.monotonic()
                    log.warning(
                        "websocket re-check failed on %s", self.scope.get("path"),
                        exc_info=failing_since is None,
                    )  # fmt: skip
                    failing_since = failing_since or now
                    failed_for = now - failing_since
                    code = (
                        CLOSE_RECHECK_FAILED
                        if failed_for >= RECHECK_FAILURE_GRACE_SECONDS
                        else None
                    )
            if code is not None:
                await self.close(code=code, reason=_REASONS[code])
                return


_REASONS = {
    CLOSE_CREDENTIALS_ENDED: "credentials ended",
    CLOSE_ACCESS_LOST: "access lost",
    CLOSE_RECHECK_FAILED: "authorization re-check failed",
}
