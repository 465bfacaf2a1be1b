"""How chaos services reach the cluster: the configured backend, unless a caller passes one."""

from __future__ import annotations

from typing import Any

from kiln.cluster.backends import get_backend


def delivery_backend(backend: Any = None) -> Any:
    """The backend passed in, or the configured delivery backend."""
    if backend is not None:
        return backend
    return get_backend()
