"""Signing keys and the JWKS that verifies them.

The JWKS (`KILN_JWT_JWKS`) is a file path or an http(s) URL; keys are chosen by
`kid`, so a new key can be published before it signs anything and an old one
removed after its tokens expired. An unknown `kid` forces one refetch (rate
limited) so a freshly rotated key works without waiting for the cache.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

MIN_REFETCH_SECONDS = 5.0
STALE_GRACE_SECONDS = 3600.0

log = logging.getLogger("kiln.identity")


class KeysUnavailable(Exception):
    """The JWKS could not be read or parsed (verification then fails closed)."""


def generate_key_pair(key_dir: Path, kid: str = "kiln-dev-1") -> tuple[Path, Path]:
    """Write a 2048-bit RSA private key and its JWKS under `key_dir` unless both exist."""
    key_dir.mkdir(parents=True, exist_ok=True)
    private_path, jwks_path = key_dir / "private.pem", key_dir / "jwks.json"
    if private_path.exists() and jwks_path.exists():
        return private_path, jwks_path
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    jwks_path.write_text(json.dumps({"keys": [public_jwk(key.public_key(), kid)]}, indent=2))
    return private_path, jwks_path


def public_jwk(public_key: rsa.RSAPublicKey, kid: str) -> dict[str, Any]:
    """The JWK of an RSA public key, tagged for RS256 signatures."""
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(public_key))
    jwk.update({"kid": kid, "use": "sig", "alg": "RS256"})
    return jwk


def load_private_key(path: str | Path) -> rsa.RSAPrivateKey:
    key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise KeysUnavailable("the signing key is not an RSA key")
    return key


class JWKSet:
    """A cached view of one JWKS source (file or URL), looked up by `kid`.

    The cache lives `cache_seconds`; an unknown `kid` refetches early, at most
    once per MIN_REFETCH_SECONDS, so random kids cannot hammer the source. When
    a refresh fails, the keys last read keep working for STALE_GRACE_SECONDS
    (a JWKS server restart does not log everyone out); with no keys at all,
    verification fails closed.
    """

    def __init__(self, source: str, cache_seconds: float = 300.0) -> None:
        self.source = source
        self.cache_seconds = cache_seconds
        self._keys: dict[str, dict[str, Any]] = {}
        self._loaded_at = 0.0  # last successful read (monotonic); 0 = never
        self._attempted_at = -MIN_REFETCH_SECONDS - 1.0  # last read attempt
        self._failed = False
        self._lock = threading.Lock()

    def _fetch(self) -> dict[str, Any]:
        if self.source.startswith(("http://", "https://")):
            with urllib.request.urlopen(self.source, timeout=5) as resp:  # noqa: S310 - scheme checked
                return json.loads(resp.read())
        return json.loads(Path(self.source).read_text())

    def _refresh(self) -> None:
        self._attempted_at = time.monotonic()
        try:
            document = self._fetch()
        except (OSError, ValueError) as exc:
            raise KeysUnavailable(f"cannot read JWKS: {exc.__class__.__name__}") from exc
        keys = {}
        for jwk in document.get("keys", []) if isinstance(document, dict) else []:
            if (
                isinstance(jwk, dict)
                and jwk.get("kty") == "RSA"
                and jwk.get("use", "sig") == "sig"
                and isinstance(jwk.get("kid"), str)
            ):
                keys[jwk["kid"]] = jwk
        self._keys = keys
        self._loaded_at = time.monotonic()

    def _ensure_fresh(self, kid: str | None) -> None:
        now = time.monotonic()
        expired = not self._loaded_at or now - self._loaded_at > self.cache_seconds
        unknown = kid is not None and kid not in self._keys
        if not (expired or unknown):
            return
        if now - self._attempted_at < MIN_REFETCH_SECONDS:
            if self._failed and not self._keys:
                raise KeysUnavailable("cannot read JWKS (retrying shortly)")
            return
        try:
            self._refresh()
            self._failed = False
        except KeysUnavailable:
            self._failed = True
            usable = (
                self._loaded_at
                and now - self._loaded_at <= self.cache_seconds + STALE_GRACE_SECONDS
            )
            if not usable:
                self._keys = {}
                raise
            log.warning(
                "JWKS refresh failed; using the keys read %.0f s ago", now - self._loaded_at
            )

    def get(self, kid: str) -> dict[str, Any] | None:
        """The JWK for `kid`, refreshing when the cache is stale or the kid is new."""
        with self._lock:
            self._ensure_fresh(kid)
            return self._keys.get(kid)

    def kids(self) -> list[str]:
        """The key ids currently published."""
        with self._lock:
            self._ensure_fresh(None)
            return list(self._keys)
