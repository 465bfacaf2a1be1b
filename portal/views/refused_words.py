"""What an environment's page says when its form refuses an extension or a deferral: the
class's own limit (the form's field problems follow it, `common.action_view`)."""

from __future__ import annotations

from portal import conf
from portal.words import lifetime_words, with_article


def extension(env) -> str:
    """An extension's refusal: how long the class lives in all."""
    limit = conf.MAX_TTL_HOURS[env.env_class]
    return f"Nothing was extended. {lifetime_words(env.env_class, limit)}."


def deferral(env) -> str:
    """A deferral's refusal: how long past expiry the class's teardown may wait."""
    minutes = int(conf.class_lifecycle(env.env_class).max_deferral // 60)
    return (
        f"Teardown was not deferred. {with_article(env.env_class).capitalize()} environment's teardown may wait at most "
        f"{minutes} minutes past its expiry."
    )
