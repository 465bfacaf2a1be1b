"""Portal reads: what a viewer may see, timelines, queues and showback."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from audit.models import ChainEvent, OutboxEvent
from kiln import changes
from kiln.cluster import AppliedRef
from kiln.cluster.backends import get_backend
from kiln.errors import NotFound
from kiln.identity import visibility
from kiln.identity.models import Team
from kiln.identity.permissions import Actor, approver_teams_filter
from portal import conf, step_order, uptime
from portal.disruption import expiry_warning_at, hard_deadline
from portal.lifecycle import Status
from portal.models import Environment, ProvisioningStep
from scheduler.showback import Window, environment_ran_cost


def expiry_warns_at(env: Environment) -> datetime | None:
    """When the owner is first warned of `env`'s expiry (portal.disruption.expiry_warning_at,
    its life counted from when it became ready); None when it has no expiry."""
    if env.expires_at is None:
        return None
    return expiry_warning_at(
        expires_at=env.expires_at,
        began_at=env.ready_at or env.created_at,
        lifecycle=conf.class_lifecycle(env.env_class),
    )


def has_decided(env: Environment, username: str) -> bool:
    """True if `username` approved or rejected the request (reads prefetched decisions)."""
    return any(d.approver_name == username for d in env.decisions.all())


def environment_queryset(viewer: Actor) -> QuerySet[Environment]:
    """Environments (and their requests) the viewer may see (kiln.identity.visibility.ENVIRONMENTS)."""
    qs = Environment.objects.select_related("team", "request", "request__requested_by")
    return visibility.restrict(qs, viewer, visibility.ENVIRONMENTS, team_field="team__slug")


@dataclass(frozen=True)
class EnvironmentFilter:
    """List filters: team slug, status, class, requester username, and free text on the name."""

    team: str = ""
    status: str = ""
    env_class: str = ""
    requested_by: str = ""
    q: str = ""


def environment_list(
    *, viewer: Actor, filters: EnvironmentFilter | None = None
) -> QuerySet[Environment]:
    """Visible environments, newest first, filtered."""
    filters = filters or EnvironmentFilter()
    qs = environment_queryset(viewer)
    if filters.team:
        qs = qs.filter(team__slug=filters.team)
    if filters.status:
        qs = qs.filter(status__in=[s.strip().upper() for s in filters.status.split(",")])
    if filters.env_class:
        qs = qs.filter(env_class=filters.env_class)
    if filters.requested_by:
        qs = qs.filter(request__requested_by__username=filters.requested_by)
    if filters.q:
        qs = qs.filter(name__icontains=filters.q)
    return qs.order_by("-created_at", "-id")


def environment_get(*, viewer: Actor, public_id: str) -> Environment:
    """One visible environment; an invisible one is the same 404 as a missing one."""
    env = environment_queryset(viewer).filter(public_id=public_id).first()
    if env is None:
        raise NotFound("no such environment")
    return env


def change_key(environment: Environment) -> str:
    """The change-notice key of one environment (kiln.changes)."""
    return change_key_of(environment.public_id)


def change_key_of(public_id: str) -> str:
    """The change-notice key of the environment with this public id."""
    return f"environment:{public_id}"


def environment_wait_for_change(
    *, viewer: Actor, environment: Environment, seconds: float
) -> Environment:
    """The environment once its status or fields change, or as it is after `seconds`.

    A status transition announces itself when it commits, which ends the wait at once; other
    changes are seen within kiln.changes.RECHECK_SECONDS. The database connection goes back to
    the pool between checks, so a waiting reader holds none.
    """
    rows = Environment.objects.filter(pk=environment.pk).values_list("status", "updated_at")
    held = (environment.status, environment.updated_at)

    def changed() -> bool:
        now = rows.first()
        if not connection.in_atomic_block:
            connection.close()
        return now != held

    changes.wait_for_change(change_key(environment), seconds=seconds, changed=changed)
    return environment_get(viewer=viewer, public_id=environment.public_id)


def approval_queue(*, viewer: Actor) -> QuerySet[Environment]:
    """Requests waiting for approval of the teams the viewer may approve for, oldest first."""
    qs = (
        Environment.objects.select_related("team", "request__requested_by")
        .prefetch_related("decisions")
        .filter(status=Status.PENDING_APPROVAL)
        .order_by("created_at", "id")
    )
    return approver_teams_filter(qs, viewer, team_field="team__slug")


def approvals_needed(*, environment: Environment) -> int:
    """Distinct approvals required: two for prod, one otherwise."""
    return 2 if environment.env_class == "prod" else 1


@dataclass(frozen=True)
class ApprovalCount:
    """One decision on a request and on whose behalf it counts: the team, and for an approval
    its place among the approvals the request needs ("1 of 2"); a rejection has no place."""

    approver: str
    decision: str
    team: str
    place: int | None
    needed: int
    reason: str = ""

    @property
    def words(self) -> str:
        """The decision in the queue's words: "counts for payments as carol's approval, 1 of 2"."""
        if self.place is None:
            return f"rejects for {self.team} as {self.approver}'s decision"
        return (
            f"counts for {self.team} as {self.approver}'s approval, {self.place} of {self.needed}"
        )


def approval_tally(
    environment: Environment, decisions: list[Any] | None = None
) -> list[ApprovalCount]:
    """Every decision on the request (`decisions`, if read already), in order, with the team it
    counts for and its place."""
    needed = approvals_needed(environment=environment)
    tally, place = [], 0
    for d in environment.decisions.all() if decisions is None else decisions:
        place += d.decision == "approve"
        tally.append(
            ApprovalCount(
                approver=d.approver_name,
                decision=d.decision,
                team=environment.team.slug,
                place=place if d.decision == "approve" else None,
                needed=needed,
                reason=d.reason,
            )
        )
    return tally


@dataclass(frozen=True)
class TimelineEntry:
    """One audit event about an environment, chained (with seq) or still on its way to the chain."""

    at: datetime
    actor: str
    action: str
    data: dict[str, Any]
    seq: int | None

    @property
    def verb(self) -> str:
        return self.action.rsplit(".", 1)[-1].replace("_", " ")


def environment_timeline(env: Environment) -> list[TimelineEntry]:
    """Every audit event whose target is this environment, in order: chained first, then pending."""
    target = f"portal.environment:{env.public_id}"
    entries: list[TimelineEntry] = []
    seen: set[str] = set()
    for ev in ChainEvent.objects.filter(target=target).order_by("seq"):
        seen.add(str(ev.event_id))
        try:
            data = json.loads(ev.data)
        except (TypeError, ValueError):
            data = {}
        entries.append(TimelineEntry(ev.recorded_at, ev.actor, ev.action, data, ev.seq))
    for ev in OutboxEvent.objects.filter(target=target).order_by("id"):
        if str(ev.event_id) not in seen:
            entries.append(TimelineEntry(ev.recorded_at, ev.actor, ev.action, ev.data, None))
    entries.sort(key=lambda e: (e.at, e.seq or 0))
    return entries


def environment_steps(env: Environment) -> list[ProvisioningStep]:
    """Every pipeline's steps as the Progress tab lists them (`portal.step_order`)."""
    return step_order.in_order(ProvisioningStep.objects.filter(environment=env))


def environment_resources(env: Environment) -> list[dict[str, Any]]:
    """Each applied object with its live health from the delivery backend."""
    if not env.applied_refs or env.status == Status.DELETED:
        return []
    backend = get_backend()
    out = []
    for raw in env.applied_refs:
        ref = AppliedRef.from_dict(raw)
        try:
            health = backend.health(ref)
            status, message = health.status.value, health.message
        except Exception as exc:  # noqa: BLE001 - a page must render even when the backend is down
            status, message = "Unknown", str(exc)[:200]
        out.append(
            {
                "ref": str(ref),
                "kind": ref.kind,
                "name": ref.name,
                "health": status,
                "message": message,
            }
        )
    return out


SHOWBACK_PERIODS = {"7d": 7, "30d": 30, "90d": 90, "365d": 365}
DEFAULT_SHOWBACK_PERIOD = "30d"


def team_showback(
    *, viewer: Actor, team: str | None = None, since: datetime | None = None
) -> list[dict[str, Any]]:
    """Spend per team, environment and class over the period from `since` (all time if None):
    the request-time estimate (hourly price x hours up within the period: ready until deleted
    or now, less its sleeps; and asleep price x hours asleep, for what sleeping keeps) beside the cost from what ran (node-hours the environment's NodePool
    provisioned in the period, priced: scheduler/showback.py). Every team the viewer may see
    has a row, at $0 when nothing of it ran."""
    now = timezone.now()
    rows: dict[str, dict[str, Any]] = {}
    for slug in teams_visible(viewer).values_list("slug", flat=True):
        if not team or slug == team:
            rows[slug] = _showback_row(slug)
    qs = environment_queryset(viewer).exclude(ready_at__isnull=True)
    if team:
        qs = qs.filter(team__slug=team)
    if since is not None:
        qs = qs.exclude(deleted_at__lt=since)
    envs = list(qs)
    ran = environment_ran_cost(
        windows={
            e.pk: Window(e.namespace, max(e.created_at, since or e.created_at), e.deleted_at)
            for e in envs
        },
        now=now,
    )
    for env in envs:
        priced = uptime.environment_priced(env, now=now, begin=since)
        unrounded = priced.cost  # totals add these, rounded once at the end
        spend = unrounded.quantize(Decimal("0.01"))
        bucket = rows.setdefault(env.team.slug, _showback_row(env.team.slug))
        bucket["total"] += unrounded
        bucket["ran_total"] += ran[env.pk].cost
        bucket["by_class"][env.env_class] = (
            bucket["by_class"].get(env.env_class, Decimal("0.00")) + unrounded
        )
        bucket["environments"].append(
            {
                "environment": env,
                "hours": priced.hours,
                "asleep_hours": priced.asleep_hours,
                "spend": spend,
                "hourly": env.hourly_cost,
                "asleep_hourly": env.asleep_hourly_cost,
                "ran": ran[env.pk],
            }
        )
    for row in rows.values():
        row["total"] = row["total"].quantize(Decimal("0.01"))
        row["by_class"] = {k: v.quantize(Decimal("0.01")) for k, v in row["by_class"].items()}
    return sorted(rows.values(), key=lambda r: r["team"])


def _showback_row(slug: str) -> dict[str, Any]:
    return {
        "team": slug,
        "total": Decimal("0.00"),
        "ran_total": Decimal("0.00"),
        "by_class": {},
        "environments": [],
    }


def spend_by_day(*, viewer: Actor, days: int, team: str | None = None) -> list[dict[str, Any]]:
    """Estimated spend (hourly price x hours up, asleep price x hours asleep) per UTC day over the last `days` days, oldest
    first, over the environments the viewer may see; each day's share of the largest day as
    `percent` for the chart."""
    now = timezone.now()
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    starts = [today - timedelta(days=n) for n in range(days - 1, -1, -1)]
    qs = environment_queryset(viewer).exclude(ready_at__isnull=True)
    if team:
        qs = qs.filter(team__slug=team)
    envs = list(qs.exclude(deleted_at__lt=starts[0]))
    slept = {env.pk: uptime.periods(env.sleeps) for env in envs}  # read once, not once a day
    series = []
    for start in starts:
        end = min(start + timedelta(days=1), now)
        spend = sum(
            (
                uptime.environment_priced(
                    env, now=now, begin=start, end=end, slept=slept[env.pk]
                ).cost
                for env in envs
            ),
            Decimal(0),
        ).quantize(Decimal("0.01"))
        series.append({"day": start.date(), "spend": spend})
    peak = max((d["spend"] for d in series), default=Decimal(0))
    for d in series:
        d["percent"] = int(d["spend"] * 100 / peak) if peak else 0
        d["top"] = 100 - d["percent"]
    return series


def teams_visible(viewer: Actor) -> QuerySet[Team]:
    """Teams whose spend the viewer may see: those whose environments it sees."""
    return visibility.restrict(
        Team.objects.order_by("slug"), viewer, visibility.ENVIRONMENTS, team_field="slug"
    )


def teams_for(viewer: Actor) -> QuerySet[Team]:
    """Teams the viewer may request environments for: the teams it sees in the directory."""
    return visibility.restrict(Team.objects.all(), viewer, visibility.TEAMS, team_field="slug")


def spend_this_month(*, viewer: Actor) -> Decimal:
    """`uptime.environment_priced` since the 1st of this month (UTC), over visible environments."""
    now = timezone.now()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    total = Decimal(0)
    for env in environment_queryset(viewer).exclude(ready_at__isnull=True):
        total += uptime.environment_priced(env, now=now, begin=start).cost
    return total.quantize(Decimal("0.01"))


def environment_expiry(*, environment: Environment, now: datetime | None = None) -> dict[str, Any]:
    """The countdown of an environment: expiry, deferral, hard deadline, warning and idle proposal."""
    now = now or timezone.now()
    env = environment
    out: dict[str, Any] = {"env": env, "now": now, "active": env.status == Status.READY}
    if env.expires_at is None or env.status != Status.READY:
        return out
    lifecycle = conf.class_lifecycle(env.env_class)
    deadline = hard_deadline(expires_at=env.expires_at, lifecycle=lifecycle)
    idle_at = (
        env.idle_proposed_at + timedelta(seconds=lifecycle.idle_grace)
        if env.idle_proposed_at
        else None
    )
    out.update(
        {
            "expires_at": env.expires_at,
            "seconds_left": max(0, int((env.expires_at - now).total_seconds())),
            "hard_deadline": deadline,
            "seconds_to_hard_deadline": max(0, int((deadline - now).total_seconds())),
            "deferred_until": env.deferred_until
            if env.deferred_until and env.deferred_until > now
            else None,
            "deferral_reason": env.deferral_reason,
            "deferrals": env.deferrals,
            "max_deferral_minutes": int(lifecycle.max_deferral // 60),
            "warn": expiry_warns_at(env) <= now,
            "expired": env.expires_at <= now,
            "idle_proposed_at": env.idle_proposed_at,
            "idle_teardown_at": idle_at,
        }
    )
    return out
