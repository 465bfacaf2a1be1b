"""audit_choices_bench prints a figure for each kept optimisation and its alternative, keeps nothing."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from audit.models import ChainEvent, OutboxEvent

pytestmark = pytest.mark.django_db


def test_choices_bench_prints_every_figure_and_leaves_no_rows():
    out = io.StringIO()
    call_command("audit_choices_bench", "--events", "5", "--pure", "50", stdout=out)
    result = json.loads(out.getvalue())
    groups = ("entry_hash", "outbox_insert", "chain_insert_with_building")
    for group in groups:
        assert len(result[group]) >= 2, group
        for figure in result[group].values():
            assert figure["cpu_us"] > 0 and figure["wall_us"] > 0
    assert OutboxEvent.objects.count() == 0 and ChainEvent.objects.count() == 0
