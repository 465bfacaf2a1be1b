"""What an environment's page says when its form refuses an extension or a deferral (the
form's field problems follow it, `common.action_view`): a deferral names its class's limit."""

from __future__ import annotations

from portal import conf
from portal.words import with_article


def extension(env) -> str:
    """An extension the form refused (hours not a whole number of at least 1): the field's
    problem alone follows. Hours past the class's life are the service's refusal, which
    names that limit with what is left (`lifetime_words`)."""
    return "Nothing was extended."


def deferral(env) -> str:
    """A deferral's refusal: how long past expiry the class's teardown may wait."""
    minutes = int(conf.class_lifecycle(env.env_class).max_deferral // 60)
    return (
        f"Teardown was not deferred. {with_article(env.env_class).capitalize()} environment's teardown may wait at most "
        f"{minutes} minutes past its expiry."
    )
