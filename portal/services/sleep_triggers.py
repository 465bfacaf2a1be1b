"""What puts environments to sleep and wakes them without a person: inactivity, team schedules,
a kubectl request to a sleeping control plane; and the teams' schedules themselves.

The reaper's pass calls `environments_sleep_pass` (portal/services/reaper.py), in order:

- inactivity: a READY environment of a class with `sleep_after` whose last activity (what the
  idle proposals read: Kiln's own moves, the tenant's requests, the team's changes in its
  namespace) and last wake are both older than that is put to sleep (`trigger: inactivity`);
  the namespace is read first, as before an idle proposal, and a change found there is activity;
- schedules: where a team's schedule now wants something other than it last did, READY
  environments are put to sleep (`schedule`) or those the schedule or inactivity put to sleep
  are woken (`schedule`); one a person or a budget put to sleep stays asleep. Acting on the
  change only lets a person's own wake at night stand until the next change;
- the TTL: a sleeping environment past its expiry goes to teardown (SLEEPING -> EXPIRING): its
  workloads run nothing, so there is no one to ask for a deferral;
- stalled pipelines: a sleep not yet asleep or a wake not yet awake, untouched for a while, is
  queued again (its worker was lost).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

import audit
from kiln.cluster import DeliveryError
from kiln.cluster.backends import get_backend
from kiln.errors import Forbidden, InvalidInput, KilnError
from kiln.identity.models import Team
from kiln.identity.permissions import Actor, can_set_sleep_schedule, system_actor
from portal import activity, conf
from portal import compose as c
from portal import sleep_schedule as sched
from portal.lifecycle import WOKEN_BY_SCHEDULE, Status
from portal.models import Environment, SleepSchedule
from portal.services.lifecycle import environment_transition
from portal.services.notices import ACTIVITY_RESOURCES, _activity_seen
from portal.services.queueing import SLEEP_TASK, WAKE_TASK, enqueue_again, enqueue_teardown
from portal.services.sleep import INACTIVITY, SCHEDULE, sleep_environment, wake_environment
from portal.services.sleep_steps import SLEEPER
from portal.words import REAPER_PREFIX

REAPER = "reaper"
log = logging.getLogger("kiln.portal.sleep")


# --- schedules ----------------------------------------------------------------------------


def schedule_of(row: SleepSchedule) -> sched.Schedule:
    """The pure schedule of a stored row (stored rows were validated when set)."""
    return sched.parse_schedule(
        time_zone=row.time_zone, wake_windows=row.wake_windows, sleep_windows=row.sleep_windows
    )


def sleep_schedule_set(
    *,
    actor: Actor,
    team: Team,
    time_zone: str,
    wake_windows: list,
    sleep_windows: list | None = None,
    enabled: bool = True,
) -> SleepSchedule:
    """Set (or replace) a team's sleep schedule; audited. A time zone that is not IANA's or a
    schedule without a waking window is refused (400 naming the field), changing nothing."""
    if not can_set_sleep_schedule(actor, team.slug):
        raise Forbidden("only engineers of the team may set its sleep schedule")
    if problem := sched.place_problem(time_zone):
        raise InvalidInput(
            "The sleep schedule is invalid.", extra={"fields": {"time_zone": [problem]}}
        )
    try:
        parsed = sched.parse_schedule(
            time_zone=time_zone, wake_windows=wake_windows, sleep_windows=sleep_windows or []
        )
    except sched.ScheduleInvalid as exc:
        raise InvalidInput(
            "The sleep schedule is invalid.", extra={"fields": {exc.field: [exc.message]}}
        ) from exc
    with transaction.atomic():
        row = SleepSchedule.objects.select_for_update().filter(team=team).first()
        previous = _described(row) if row else None
        row = row or SleepSchedule(team=team)
        row.time_zone = parsed.time_zone
        row.wake_windows = [w.as_dict() for w in parsed.wake]
        row.sleep_windows = [w.as_dict() for w in parsed.sleep]
        row.enabled = enabled
        row.last_state = ""  # a new schedule acts on what it wants now
        row.save()
        audit.record(
            actor,
            "portal.sleep_schedule.set",
            f"kiln.team:{team.slug}",
            {"schedule": _described(row), "previous": previous},
        )
    return row


def sleep_schedule_delete(*, actor: Actor, team: Team) -> bool:
    """Remove a team's sleep schedule (environments asleep stay asleep); audited. False if none."""
    if not can_set_sleep_schedule(actor, team.slug):
        raise Forbidden("only engineers of the team may remove its sleep schedule")
    with transaction.atomic():
        row = SleepSchedule.objects.select_for_update().filter(team=team).first()
        if row is None:
            return False
        audit.record(
            actor, "portal.sleep_schedule.deleted", f"kiln.team:{team.slug}", _described(row)
        )
        row.delete()
    return True


def _described(row: SleepSchedule) -> dict:
    return {
        "time_zone": row.time_zone,
        "wake_windows": row.wake_windows,
        "sleep_windows": row.sleep_windows,
        "enabled": row.enabled,
    }


def asleep_hours_per_day(team_id: int, *, now: datetime | None = None) -> float | None:
    """Hours a day the team's schedule keeps environments asleep, over the coming week (None:
    no schedule, or one turned off)."""
    row = SleepSchedule.objects.filter(team_id=team_id, enabled=True).first()
    if row is None:
        return None
    start = now or timezone.now()
    awake = sched.awake_fraction(schedule_of(row), start, start + timedelta(days=7))
    return round(24 * (1 - awake), 2)


# --- the pass ---------------------------------------------------------------------------


def _namespace_change(env: Environment) -> datetime | None:
    """The team's latest change in its namespace (portal.activity), None if none or unreadable."""
    try:
        objects = get_backend().list_kinds(
            (*c.WORKLOAD_RESOURCES, *ACTIVITY_RESOURCES), env.namespace
        )
    except DeliveryError as exc:
        log.warning("inactivity check of %s: cannot read its namespace: %s", env.namespace, exc)
        return timezone.now()  # no evidence either way: do not sleep it on this pass
    return activity.latest_team_change(objects)


def _inactive_since(env: Environment) -> datetime:
    moments = [env.last_activity_at or env.ready_at or env.created_at, env.woke_at]
    return max(m for m in moments if m is not None)


def inactive_due(*, now: datetime) -> list[Environment]:
    """READY environments whose class sleeps after inactivity and that were inactive that long."""
    out = []
    for env in Environment.objects.filter(status=Status.READY).select_related("team"):
        lifecycle = conf.class_lifecycle(env.env_class)
        if not lifecycle.may_sleep or lifecycle.sleep_after is None:
            continue
        if _inactive_since(env) + timedelta(seconds=lifecycle.sleep_after) <= now:
            out.append(env)
    return out


def _sleep_inactive(env: Environment, *, now: datetime) -> bool:
    seen = _namespace_change(env)
    if seen is not None and seen > _inactive_since(env):
        if seen < now:
            _activity_seen(env=env, actor=system_actor(SLEEPER), at=seen)
        return False
    lifecycle = conf.class_lifecycle(env.env_class)
    return _try(
        sleep_environment,
        env,
        reason=f"no activity for {lifecycle.sleep_after / 3600:g} h (class setting sleep_after)",
        trigger=INACTIVITY,
    )


def _try(verb, env: Environment, **kwargs) -> bool:
    """A trigger's move; one the environment left the state for meanwhile is passed over."""
    try:
        verb(env, actor=system_actor(SLEEPER), **kwargs)
    except KilnError as exc:
        log.info("%s of %s passed over: %s", verb.__name__, env.public_id, exc.message)
        return False
    return True


def _schedules_due(*, now: datetime) -> list[tuple[SleepSchedule, str]]:
    due = []
    for row in SleepSchedule.objects.filter(enabled=True).select_related("team"):
        wanted = row.AWAKE if sched.wants_awake(schedule_of(row), now) else row.ASLEEP
        if wanted != row.last_state:
            due.append((row, wanted))
    return due


def _apply_schedule(row: SleepSchedule, wanted: str) -> list[str]:
    """Sleep or wake the team's environments as its schedule now wants; record what it wanted."""
    moved = []
    if wanted == row.ASLEEP:
        for env in Environment.objects.filter(team=row.team, status=Status.READY):
            if conf.class_lifecycle(env.env_class).may_sleep and _try(
                sleep_environment, env, reason="the team's schedule: asleep", trigger=SCHEDULE
            ):
                moved.append(env.public_id)
    else:
        for env in Environment.objects.filter(
            team=row.team, status=Status.SLEEPING, sleep_trigger__in=WOKEN_BY_SCHEDULE
        ):
            if _try(wake_environment, env, reason="the team's schedule: awake", trigger=SCHEDULE):
                moved.append(env.public_id)
    with transaction.atomic():
        SleepSchedule.objects.filter(pk=row.pk).update(last_state=wanted)
        audit.record(
            system_actor(SLEEPER),
            "portal.sleep_schedule.applied",
            f"kiln.team:{row.team.slug}",
            {"wanted": wanted, "environments": moved},
        )
    return moved


def _expire_asleep(env: Environment) -> bool:
    """SLEEPING -> EXPIRING at its TTL, teardown queued; False if it left SLEEPING meanwhile."""
    try:
        with transaction.atomic():
            environment_transition(
                actor=system_actor(REAPER),
                environment=env,
                to=Status.EXPIRING,
                # The prefix every TTL expiry's reason starts with: it reads as the TTL running
                # out, not as a person asking (portal.lifecycle.teardown_requested).
                reason=f"{REAPER_PREFIX} while asleep",
                data={"expires_at": env.expires_at},
            )
            enqueue_teardown(environment=env)
    except KilnError:
        return False
    return True


def environments_sleep_pass(*, now: datetime | None = None, dry_run: bool = True) -> dict:
    """One pass of the triggers (see the module docstring); what it did or would do."""
    now = now or timezone.now()
    inactive = inactive_due(now=now)
    schedules = _schedules_due(now=now)
    expired = list(
        Environment.objects.filter(status=Status.SLEEPING, expires_at__lte=now).select_related(
            "team"
        )
    )
    stale = now - timedelta(seconds=max(60.0, conf.poll_seconds() * 20))
    stalled_sleep = list(
        Environment.objects.filter(
            status=Status.SLEEPING, slept_at__isnull=True, updated_at__lt=stale
        )
    )
    stalled_wake = list(Environment.objects.filter(status=Status.WAKING, updated_at__lt=stale))
    report = {
        "slept_inactive": [e.public_id for e in inactive],
        "schedules": [f"{row.team.slug}:{wanted}" for row, wanted in schedules],
        "expired_asleep": [e.public_id for e in expired],
        "resumed_sleep": [e.public_id for e in stalled_sleep],
        "resumed_wake": [e.public_id for e in stalled_wake],
    }
    if dry_run:
        return report
    report["slept_inactive"] = [e.public_id for e in inactive if _sleep_inactive(e, now=now)]
    for row, wanted in schedules:
        _apply_schedule(row, wanted)
    report["expired_asleep"] = [e.public_id for e in expired if _expire_asleep(e)]
    enqueue_again(tasks=[(SLEEP_TASK, stalled_sleep), (WAKE_TASK, stalled_wake)])
    return report
