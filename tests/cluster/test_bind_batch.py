"""The simulated cluster's binding write: on PostgreSQL one UPDATE per chunk, the same rows as row by row."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from kiln.cluster.base import PodBinding
from kiln.cluster.models import SimulatedObject
from kiln.cluster.simulated import SimulatedBackend
from kiln.cluster.simulated_bulk import _bind_chunk_rows, _bind_chunk_sql

pytestmark = pytest.mark.django_db


def _pods(backend: SimulatedBackend, namespace: str) -> None:
    """fresh (no annotations), noted (one of its own), bound (to n0 already), going (deleting)."""
    backend.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}])
    pods = []
    for name, extra in (
        ("fresh", {}),
        ("noted", {"annotations": {"team": "a"}}),
        ("bound", {}),
        ("going", {}),
    ):
        spec = {"containers": [{"name": "c"}]}
        if name == "bound":
            spec["nodeName"] = "n0"
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, **extra},
                "spec": spec,
            }
        )
    backend.apply(pods)
    # Being deleted, held by a finalizer (set on the row: the simulated controller's state).
    SimulatedObject.objects.filter(namespace=namespace, name="going").update(
        deletion_timestamp=timezone.now()
    )


def _bindings(namespace: str) -> list[PodBinding]:
    note = {"kiln.dev/score-explanation": '{"node":"n1"}'}
    return [
        PodBinding(namespace, "fresh", "n1", note),
        PodBinding(namespace, "noted", "n2", note),
        PodBinding(namespace, "bound", "n3", note),  # already bound: the API server's 409
        PodBinding(namespace, "going", "n1", note),  # being deleted
        PodBinding(namespace, "missing", "n1", note),
        PodBinding(namespace, "fresh", "n9", note),  # named twice: the first binding holds
    ]


def _seen(namespace: str) -> dict[str, tuple]:
    """The stored rows (not rendered: a deleting pod's row is read as it is)."""
    out = {}
    for obj in SimulatedObject.objects.filter(kind="Pod", namespace=namespace):
        out[obj.name] = (
            (obj.manifest.get("spec") or {}).get("nodeName"),
            (obj.manifest.get("metadata") or {}).get("annotations"),
            obj.status.get("phase"),
            [c["type"] for c in obj.status.get("conditions") or []],
            obj.resource_version,
        )
    return out


def test_one_update_per_chunk_binds_exactly_what_row_by_row_binding_binds():
    assert connection.vendor == "postgresql"  # the suite runs on PostgreSQL, as production
    backend = SimulatedBackend()
    _pods(backend, "by-sql")
    _pods(backend, "by-rows")
    before = _seen("by-sql")
    now = timezone.now()
    assert _bind_chunk_sql(_bindings("by-sql"), now) == 2
    assert _bind_chunk_rows(_bindings("by-rows"), now) == 2
    assert _seen("by-sql") == _seen("by-rows")
    seen = _seen("by-sql")
    note = {"kiln.dev/score-explanation": '{"node":"n1"}'}
    assert seen["fresh"][:3] == ("n1", note, "Running")
    assert seen["noted"][:3] == ("n2", {"team": "a", **note}, "Running")
    assert seen["fresh"][4] == before["fresh"][4] + 1
    assert seen["bound"] == before["bound"] and seen["going"] == before["going"]
