"""scheduler_bench runs small, in process and over HTTP against the extender's own server."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError


@pytest.mark.django_db
def test_scheduler_bench_measures_in_process_and_over_http():
    out = io.StringIO()
    call_command("scheduler_bench", "--nodes", "60", "--requests", "20", stdout=out)
    result = json.loads(out.getvalue())
    assert result["command"].startswith("python manage.py scheduler_bench")
    assert result["nodes"] == 60 and result["list_size"]["filter_names"] == 60
    # The HTTP figures come from a separate process serving the same 60 synthetic nodes.
    assert result["http"]["server"].startswith("scheduler_extender")
    for part in ("in_process", "http"):
        assert result[part]["p50_ms"] > 0, part
        assert result[part]["p99_ms"] >= result[part]["p50_ms"], part


def test_serving_needs_a_port():
    with pytest.raises(CommandError, match="--serve needs --port"):
        call_command("scheduler_bench", "--serve", "--nodes", "10")
