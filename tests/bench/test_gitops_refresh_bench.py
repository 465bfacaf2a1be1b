"""gitops_refresh_bench runs small: both modes sync every commit, only one asks for refreshes."""

from __future__ import annotations

import io
import json
import socket

from django.core.management import call_command


def _two_free_ports() -> int:
    """A port p with p and p + 1 free on loopback (the command takes the first of two)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    raise AssertionError("no two adjacent free ports on loopback")


def test_gitops_refresh_bench_syncs_every_commit_in_both_modes():
    out = io.StringIO()
    call_command(
        "gitops_refresh_bench",
        "--commits", "3", "--poll-seconds", "0.4", "--sync-seconds", "0.01",
        "--port", str(_two_free_ports()), "--json",
        stdout=out,
    )  # fmt: skip
    result = json.loads(out.getvalue())
    assert result["command"].startswith("python manage.py gitops_refresh_bench")
    refresh, poll = result["modes"]["refresh"], result["modes"]["poll"]
    assert refresh["commits"] == poll["commits"] == 3
    # Each commit in refresh mode is followed by one refresh call; the poll mode never calls.
    assert refresh["refreshes"] >= 3 and poll["refreshes"] == 0
    assert poll["polls"] >= 1
    assert 0 <= refresh["commit_to_synced_min_s"] <= refresh["commit_to_synced_max_s"]
