"""Sleeping and waking an environment: the verbs people, triggers and budgets call.

`sleep_environment` moves a READY environment to SLEEPING (the caller's move, audited as
`portal.environment.sleep_started` with who asked and why) and queues the sleep pipeline
(portal/services/sleep_steps.py), which scales it to zero and settles as
`portal.environment.asleep`. `wake_environment` moves an asleep one to WAKING
(`portal.environment.wake_started`) and queues the wake pipeline, which ends READY
(`portal.environment.readied`, with `seconds_to_wake`). A wake asked for while the
environment is still falling asleep is kept (`portal.environment.wake_requested`) and starts
as soon as it is asleep, so the two pipelines never write the same objects at once.

Refused, changing nothing: sleeping anything but a READY environment, or one whose class may
not sleep (`may_sleep`, a class setting: prod by default); waking one that is not sleeping
(one being torn down, say). Waking one already awake or waking is a no-op.
"""

from __future__ import annotations

from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.db import transaction
from django.utils import timezone

from kiln.errors import Conflict, Forbidden, IllegalTransition
from kiln.identity.permissions import Actor, can_sleep_environment, system_actor
from portal import conf, uptime
from portal.lifecycle import BUDGET, INACTIVITY, KUBECTL, OWNER, SCHEDULE, TRIGGERS, Status, label
from portal.models import Environment
from portal.services import cost
from portal.services.lifecycle import environment_update
from portal.services.pipeline import NOOP, Move, pipeline_advance, pipeline_enter
from portal.services.queueing import enqueue_sleep, enqueue_wake
from portal.services.sleep_steps import SLEEP, SLEEPER, WAKE

__all__ = [
    "BUDGET",
    "INACTIVITY",
    "KUBECTL",
    "OWNER",
    "SCHEDULE",
    "SleepForbidden",
    "environment_sleep_advance",
    "environment_wake_advance",
    "sleep_environment",
    "sleep_savings",
    "wake_environment",
    "wake_seconds",
]


class SleepForbidden(Conflict):
    """The environment's class may not sleep (class setting `may_sleep`)."""

    code = "sleep_forbidden"


def _permitted(actor: Actor, environment: Environment, verb: str) -> None:
    if not can_sleep_environment(actor, environment.team.slug):
        # "put {} to sleep", "wake {}": the environment where the verb has it.
        raise Forbidden(f"only engineers of the owning team may {verb.format('this environment')}")


def sleep_environment(
    environment: Environment, *, actor: Actor, reason: str = "", trigger: str = OWNER
) -> Environment:
    """READY -> SLEEPING by `actor` (audited with `trigger` and `reason`), and the sleep pipeline
    queued. Raises SleepForbidden (409) for a class that may not sleep and IllegalTransition
    (409) for any status but READY, changing nothing."""
    _permitted(actor, environment, "put {} to sleep")
    if trigger not in TRIGGERS:
        raise ValueError(f"unknown sleep trigger {trigger!r}")
    lifecycle = conf.class_lifecycle(environment.env_class)
    if not lifecycle.may_sleep:
        raise SleepForbidden(
            f"{environment.env_class} environments may not sleep (class setting may_sleep)",
            extra={"rule": "may_sleep", "env_class": environment.env_class},
        )
    status = Status(environment.status)
    if status != Status.READY:
        raise IllegalTransition(
            f"only a ready environment can sleep; this one is {label(status).lower()}",
            extra={"from": status.value, "to": Status.SLEEPING.value, "rule": "ready_only"},
        )
    move = Move(
        reason or f"sleep asked for ({trigger})",
        updates={"sleep_trigger": trigger, "slept_at": None, "wake_requested_at": None},
        data={"trigger": trigger},
    )
    with transaction.atomic():
        pipeline_enter(SLEEP, actor=actor, environment=environment, move=move)
        enqueue_sleep(environment=environment)
    return environment


def wake_environment(
    environment: Environment, *, actor: Actor, reason: str = "", trigger: str = OWNER
) -> Environment:
    """SLEEPING (asleep) -> WAKING by `actor`, and the wake pipeline queued; still falling
    asleep: the wake is kept and starts once asleep; READY or WAKING: nothing to do. Any other
    status (being torn down, failed) raises IllegalTransition (409), changing nothing."""
    _permitted(actor, environment, "wake {}")
    if trigger not in TRIGGERS:
        raise ValueError(f"unknown wake trigger {trigger!r}")
    with transaction.atomic():
        env = Environment.objects.select_for_update(of=("self",)).get(pk=environment.pk)
        status = Status(env.status)
        if status in (Status.READY, Status.WAKING):
            return env
        if status != Status.SLEEPING:
            raise IllegalTransition(
                f"an environment in {status.value} cannot wake",
                extra={"from": status.value, "to": Status.WAKING.value},
            )
        now = timezone.now()
        if env.slept_at is None:  # the sleep pipeline is still running: wake once it is done
            if env.wake_requested_at is None:
                environment_update(
                    actor=actor,
                    environment=env,
                    action="wake_requested",
                    updates={"wake_requested_at": now},
                    data={"trigger": trigger, "reason": reason, "team": env.team.slug},
                )
            return env
        move = Move(
            reason or f"wake asked for ({trigger})",
            # The sleep ends as the wake begins: its nodes come back from now on, and a wake
            # that fails leaves an environment that is not asleep.
            updates={
                "wake_requested_at": env.wake_requested_at or now,
                "sleeps": uptime.awake_from(env.sleeps, now),
            },
            data={
                "trigger": trigger,
                "asleep_seconds": round((now - env.slept_at).total_seconds()),
            },
        )
        pipeline_enter(WAKE, actor=actor, environment=env, move=move)
        enqueue_wake(environment=env)
    environment.refresh_from_db()
    return environment


def environment_sleep_advance(*, environment_id: int) -> str:
    """Advance the sleep pipeline (the task): `pending`, `failed`, `noop`, or `sleeping` once
    asleep; a wake asked for meanwhile starts then."""
    env = Environment.objects.filter(pk=environment_id).only("status").first()
    if env is None or env.status != Status.SLEEPING:
        return NOOP
    outcome = pipeline_advance(SLEEP, environment_id=environment_id)
    env = Environment.objects.select_related("team").get(pk=environment_id)
    if env.status == Status.SLEEPING and env.slept_at is not None and env.wake_requested_at:
        wake_environment(
            env,
            actor=system_actor(SLEEPER),
            reason="woken as asked while it fell asleep",
            trigger=OWNER,
        )
    return outcome


def environment_wake_advance(*, environment_id: int) -> str:
    """Advance the wake pipeline (the task): `ready`, `pending`, `failed` or `noop`."""
    env = Environment.objects.filter(pk=environment_id).only("status").first()
    if env is None or env.status != Status.WAKING:
        return NOOP
    return pipeline_advance(WAKE, environment_id=environment_id)


def wake_seconds(environment: Environment) -> float | None:
    """Seconds from the last wake's request to READY (None if it never woke)."""
    return environment.last_wake_seconds


CENT = Decimal("0.01")


def sleep_savings(environment: Environment, *, asleep_hours_per_day: float | None = None) -> dict:
    """What sleeping saves, priced as the cost estimate is (portal/services/cost.py): every line
    but the database, which is kept; per day asleep, and per day at `asleep_hours_per_day`."""
    req = environment.request
    estimate = cost.estimate(
        env_class=environment.env_class,
        ttl_hours=req.ttl_hours,
        cpu=req.cpu,
        memory_gib=req.memory_gib,
        gpu=req.gpu,
        spot=req.spot_node_pool,
        tenant_control_plane=req.tenant_control_plane,
        database=req.database,
    )
    kept = [line for line in estimate["lines"] if line["item"].startswith("PostgreSQL")]
    kept_hourly = estimate["asleep_hourly"]
    saved_hourly = estimate["hourly"] - kept_hourly
    out = {
        "hourly": estimate["hourly"],
        "saved_hourly": saved_hourly,
        "kept_hourly": kept_hourly,
        "kept": [line["item"] for line in kept],
        "per_day_asleep": (saved_hourly * 24).quantize(CENT, ROUND_HALF_UP),
        "currency": estimate["currency"],
        "source": estimate["source"],
    }
    if asleep_hours_per_day is not None:
        hours = Decimal(str(round(asleep_hours_per_day, 2)))
        out["asleep_hours_per_day"] = hours
        out["per_day_on_schedule"] = (saved_hourly * hours).quantize(CENT, ROUND_HALF_UP)
    return out


def asleep_for(environment: Environment, *, now: datetime | None = None) -> float:
    """Seconds the environment has been asleep (0 when it is not)."""
    if environment.slept_at is None or environment.status != Status.SLEEPING:
        return 0.0
    return ((now or timezone.now()) - environment.slept_at).total_seconds()
