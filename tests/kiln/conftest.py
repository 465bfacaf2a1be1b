"""Fixtures of the foundation's tests."""

import pytest


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Hash test passwords cheaply; the real hasher's cost buys nothing in these tests."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
