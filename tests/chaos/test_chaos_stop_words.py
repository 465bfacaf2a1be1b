# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""A stop condition reads as words on the experiment's page; the API and the audit keep its
code (`error-rate-above 0.2`)."""

from __future__ import annotations

import pytest

from canary.chaos import stops
from canary.chaos.services import experiment_create
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    backend,
    chaos_settings,
    engineer,
    shop,
    signed_in_engineer,
)


@pytest.mark.parametrize(
    "condition,words",
    [
        ({"kind": "error-rate-above", "threshold": 0.2}, "error rate above 20%"),
        ({"kind": "latency-p99-above-ms", "threshold": 500.0}, "p99 latency above 500 ms"),
        ({"kind": "canary-rolled-back"}, "a rollout of the target rolled back"),
    ],
)
def test_a_condition_reads_as_words_on_the_page(condition, words):
    assert stops.in_words(condition) == words


@pytest.mark.django_db
def test_the_experiment_page_names_its_conditions_and_what_stopped_it_in_words(
    client, engineer, shop, backend, django_user_model
):
    exp = experiment_create(
        actor=engineer,
        data=abort_data(
            stop_conditions=[
                {"kind": "error-rate-above", "threshold": 0.2},
                {"kind": "canary-rolled-back"},
            ]
        ),
        backend=backend,
    )
    verdict = stops.Verdict(
        outcome="breached",
        condition={"kind": "canary-rolled-back"},
        value=1.0,
        source="audit chain",
        reason="canary-rolled-back: a rollout of the target rolled back (audit chain)",
    )
    type(exp).objects.filter(pk=exp.pk).update(end_evidence=verdict.evidence())
    signed_in_engineer(client, django_user_model)
    page = client.get(f"/chaos/{exp.pk}/").content.decode()
    assert ">error rate above 20%<" in page and ">a rollout of the target rolled back<" in page
    assert "Stopped by its condition “a rollout of the target rolled back”" in page
    assert ">canary-rolled-back<" not in page and "error-rate-above 0.2<" not in page
    # The lease's duration is not the experiment's: it says what it is.
    assert "<dt>Lease timings</dt>" in page and "held 1.0 s without renewal" in page
