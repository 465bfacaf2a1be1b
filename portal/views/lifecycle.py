"""Lifecycle forms of the environment page: defer teardown (do-not-disrupt), keep an idle environment,
put it to sleep and wake it."""

from __future__ import annotations

from django import forms

from portal import conf, services
from portal.lifecycle import Status
from portal.services import sleep, sleep_triggers
from portal.views import refused_words
from portal.views.common import action_view

ON_ITS_PAGE = "asked for on the environment's page"  # the reason a page's sleep or wake records


class DeferForm(forms.Form):
    """Hold teardown for some minutes past expiry, for a reason."""

    minutes = forms.IntegerField(min_value=1, max_value=525600)
    reason = forms.CharField(max_length=500)


environment_defer = action_view(
    services.environment_defer_teardown,
    done="Teardown deferred by {minutes} min.",
    form=DeferForm,
    invalid=refused_words.deferral,
)


def _kept(env) -> str:
    if env.idle_proposed_at is None:
        return "Kept: it counts as active from now (it was not proposed for early teardown)."
    return "Kept: it is no longer proposed for early teardown."


def _woken(env) -> str:
    if env.status in (Status.READY, Status.WAKING):
        return "It is awake already: nothing to do."
    return "Waking: everything comes back as it was."


environment_keep = action_view(services.environment_keep, done=_kept)
environment_sleep = action_view(
    sleep.sleep_environment,
    done="Going to sleep: workloads, control plane and nodes to zero.",
    reason=ON_ITS_PAGE,
)
environment_wake = action_view(sleep.wake_environment, done=_woken, reason=ON_ITS_PAGE)


def sleep_context(env) -> dict:
    """The environment page's sleep card: whether its class sleeps, what sleeping saves a day
    (priced as the estimate is), the team's schedule's hours asleep and the last wake's time."""
    lifecycle = conf.class_lifecycle(env.env_class)
    hours = sleep_triggers.asleep_hours_per_day(env.team_id)
    return {
        "may_sleep": lifecycle.may_sleep,
        "sleep_after_hours": None
        if lifecycle.sleep_after is None
        else round(lifecycle.sleep_after / 3600, 1),
        "sleep_savings": sleep.sleep_savings(env, asleep_hours_per_day=hours),
        "falling_asleep": env.status == "SLEEPING" and env.slept_at is None,
    }
