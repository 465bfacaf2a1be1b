"""Refusals read as sentences: the class with its article, a policy's message with its stop,
statuses in words rather than their codes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kiln.errors import Forbidden, IllegalTransition, InvalidInput
from portal.services import sleep
from portal.services.expiry import environment_extend
from portal.views import refused_words
from portal.views.requests import _sentence
from tests.portal.test_lifecycle_notices import ready_env


@pytest.mark.parametrize(
    ("env_class", "start"),
    [("ephemeral", "An ephemeral"), ("dev", "A dev"), ("prod", "A prod")],
)
def test_a_class_takes_its_article(env_class, start):
    env = SimpleNamespace(env_class=env_class)
    assert f"Teardown was not deferred. {start} environment's" in refused_words.deferral(env)


def test_a_policy_message_ends_as_a_sentence():
    assert _sentence("prod needs a justification of at least 20 characters") == (
        "prod needs a justification of at least 20 characters."
    )
    assert _sentence("Too big.") == "Too big." and _sentence("") == ""


@pytest.mark.django_db
def test_a_state_refusal_names_the_status_in_words(people, django_capture_on_commit_callbacks):
    env = ready_env(people, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        sleep.sleep_environment(env, actor=people["alice"])
    env.refresh_from_db()
    with pytest.raises(IllegalTransition) as refused:
        sleep.sleep_environment(env, actor=people["alice"])
    assert "only a ready environment can sleep; this one is sleeping" in refused.value.message
    with pytest.raises(IllegalTransition) as refused:
        environment_extend(actor=people["alice"], environment=env, hours=1)
    assert "(this one is sleeping)" in refused.value.message
    with pytest.raises(Forbidden) as refused:
        sleep.wake_environment(env, actor=people["carol"])
    assert refused.value.message == "only engineers of the owning team may wake this environment"


@pytest.mark.django_db
def test_an_extension_past_the_class_says_how_much_is_left(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)  # dev, 48 h of 336
    for hours in (289, 10**30):  # any number: refused before any arithmetic on it
        with pytest.raises(InvalidInput) as refused:
            environment_extend(actor=people["alice"], environment=env, hours=hours)
        assert refused.value.extra["fields"]["hours"] == [
            "A dev environment lives at most 336 h in all: "
            "this one can be extended by at most 288 h."
        ]
    assert environment_extend(actor=people["alice"], environment=env, hours=288).expires_at
