"""The reaper's pass (the beat task `portal.reap_expired`): nothing stays alive without a way out.

One pass, in order: warn and propose idle environments (`notices`); expire READY environments past
their TTL, asking their workloads first (`expiry`); put inactive environments to sleep, follow the
teams' sleep schedules, expire sleeping ones past their TTL and resume stalled sleeps and wakes
(`sleep_triggers`); tear down FAILED environments whose class's
grace has passed, so a failed or half-provisioned environment never keeps what it applied; and
re-queue provisioning or teardown that stalled (a worker killed mid-step). Dry run (the default)
reports and changes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from kiln.identity.permissions import system_actor
from portal import conf
from portal.lifecycle import Status
from portal.models import Environment
from portal.services.expiry import environments_expire_due
from portal.services.lifecycle import environment_transition
from portal.services.notices import environments_warn_and_propose
from portal.services.queueing import PROVISION_TASK, TEARDOWN_TASK, enqueue_again, enqueue_teardown
from portal.services.sleep_triggers import environments_sleep_pass
from portal.services.teardown import reset_teardown_steps, teardown_deadline_from_now

REAPER = "reaper"


def failed_past_grace(*, now: datetime) -> list[Environment]:
    """FAILED environments whose class's grace has run out (the FAILED move is their last update)."""
    out = []
    for env in Environment.objects.filter(status=Status.FAILED).order_by("updated_at"):
        grace = conf.class_lifecycle(env.env_class).failed_grace
        if env.updated_at + timedelta(seconds=grace) <= now:
            out.append(env)
    return out


def environment_teardown_failed(*, environment: Environment) -> bool:
    """FAILED -> TEARING_DOWN by the reaper, with a fresh deadline; False if it left FAILED."""
    with transaction.atomic():
        locked = Environment.objects.select_for_update().get(pk=environment.pk)
        if locked.status != Status.FAILED:
            return False
        reset_teardown_steps(locked)
        environment_transition(
            actor=system_actor(REAPER),
            environment=locked,
            to=Status.TEARING_DOWN,
            reason="failed environment torn down after its grace period",
            updates={"teardown_deadline": teardown_deadline_from_now()},
            data={"failed_reason": locked.status_reason},
        )
        enqueue_teardown(environment=locked)
    return True


def environments_reap_expired(
    *, now: datetime | None = None, dry_run: bool = True
) -> dict[str, list[str]]:
    """One reaper pass (see the module docstring); returns what it did or would do."""
    now = now or timezone.now()
    report = environments_warn_and_propose(now=now, dry_run=dry_run)
    report |= environments_expire_due(now=now, dry_run=dry_run)
    report |= environments_sleep_pass(now=now, dry_run=dry_run)
    failed = failed_past_grace(now=now)
    stale = now - timedelta(seconds=max(60.0, conf.poll_seconds() * 20))
    stalled_teardown = list(
        Environment.objects.filter(
            status__in=[Status.EXPIRING, Status.TEARING_DOWN], updated_at__lt=stale
        )
    )
    stalled_provisioning = list(
        Environment.objects.filter(
            status__in=[Status.APPROVED, Status.PROVISIONING], updated_at__lt=stale
        )
    )
    report |= {
        "failed_torn_down": [e.public_id for e in failed],
        "resumed_teardown": [e.public_id for e in stalled_teardown],
        "resumed_provisioning": [e.public_id for e in stalled_provisioning],
    }
    if dry_run:
        return report
    for env in failed:
        environment_teardown_failed(environment=env)
    enqueue_again(tasks=[(TEARDOWN_TASK, stalled_teardown), (PROVISION_TASK, stalled_provisioning)])
    return report
