"""A delivery backend double for "no I/O under a row lock" tests (DESIGN.md).

Each call asserts no transaction is open, counts itself, then goes to the real backend; a
tenant API server client it hands out is checked the same way. Use it in a transactional
test (real commits), where `connection.in_atomic_block` is True only inside a transaction
the code under test opened itself.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db import connection


class OutsideTransactions:
    """Wraps a delivery backend; every call fails its test when made inside a transaction."""

    def __init__(self, inner: Any, calls: Counter) -> None:
        self._inner, self._calls = inner, calls

    def __getattr__(self, name: str):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            assert not connection.in_atomic_block, f"{name} called inside a transaction"
            self._calls[name] += 1
            result = attr(*args, **kwargs)
            if name == "tenant" and result is not None:
                return OutsideTransactions(result, self._calls)
            return result

        return call
