"""The Workload Commitment chart over time has its series as a data table on the page."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from scheduler.cluster_reads import commitment_rows, commitment_series
from scheduler.models import CommitmentSample
from tests.kiln.pages import tables

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
T1 = datetime(2026, 12, 1, 9, 5, tzinfo=UTC)


def _sample(at: datetime, cpu: float, cpu_pending: float) -> None:
    figures = {
        "resources": {
            "cpu": {"ratio": cpu, "pending_ratio": cpu_pending},
            "memory": {"ratio": 0.5, "pending_ratio": 0.0},
            "gpu": {"ratio": None, "pending_ratio": None},  # no GPU capacity
        }
    }
    CommitmentSample.objects.create(taken_at=at, nodes=3, figures=figures)


def test_rows_are_the_chart_columns_in_percent_oldest_first():
    _sample(T1, 0.5, 0.125)
    _sample(T0, 0.25, 2 / 3)
    rows = commitment_rows(commitment_series())
    assert [r["at"] for r in rows] == [T0, T1]
    # cpu, cpu pending, memory, memory pending, gpu, gpu pending; ratio x 100.
    assert rows[0]["cells"] == [25.0, 2 / 3 * 100, 50.0, 0.0, None, None]
    assert rows[1]["cells"][:2] == [50.0, 12.5]


def test_the_scheduler_page_shows_the_table_beneath_the_chart():
    _sample(T0, 0.25, 2 / 3)
    user = get_user_model().objects.create_user("alice", password="pw-alice-123")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    client = Client()
    client.force_login(user)
    page = client.get(reverse("scheduler:overview")).content.decode()
    header, *rows = tables(page)["commitment-table"]
    assert header == [
        "Sample (UTC)",
        "cpu committed %",
        "cpu pending %",
        "memory committed %",
        "memory pending %",
        "gpu committed %",
        "gpu pending %",
    ]
    assert rows == [["2026-12-01 09:00:00", "25.0", "66.7", "50.0", "0.0", "—", "—"]]
    assert 'role="img" aria-labelledby="commitment-chart-title"' in page
    assert "Workload Commitment over time: the data as a table" in page


def test_without_samples_there_is_no_table_but_a_sentence():
    user = get_user_model().objects.create_user("bob", password="pw-bob-123456")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    client = Client()
    client.force_login(user)
    page = client.get(reverse("scheduler:overview")).content.decode()
    assert "commitment-table" not in tables(page) and "No samples yet" in page
