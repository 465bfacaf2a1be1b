"""The portal's items on the attention list (`kiln.attention`): requests waiting for this
approver, and the viewer's environments that are expiring or proposed idle."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone

from kiln.attention import Item, register
from kiln.identity.permissions import Actor, can_approve
from portal import budget_reads, selectors
from portal.budget_math import REACHED
from portal.lifecycle import Status


def _about(env, kind: str, tag: str = "", *, title: str, detail: str, at) -> Item:
    """An item about one environment, linking to its page; its key is the kind, the environment
    and `tag` (which tells one occasion of the kind from the next)."""
    return Item(
        key=f"portal.{kind}:{env.public_id}" + (f":{tag}" if tag else ""),
        kind=kind,
        title=title,
        detail=detail,
        url=reverse("portal:environment-detail", args=[env.public_id]),
        at=at,
    )


@register
def approvals_for_me(actor: Actor) -> list[Item]:
    """Requests this approver may still decide (not their own, not decided by them yet)."""
    if not can_approve(actor):
        return []
    items = []
    for env in selectors.approval_queue(viewer=actor)[:50]:
        requester = env.request.requested_by.get_username()
        if requester == actor.username or not can_approve(actor, env.team.slug, requester):
            continue
        if any(d.approver_name == actor.username for d in env.decisions.all()):
            continue
        needed = selectors.approvals_needed(environment=env)
        detail = (
            f"{env.env_class} requested by {requester}; needs {needed} approval"
            f"{'s' if needed != 1 else ''} from the approvers of {env.team.name}"
        )
        title = f"Approve or reject {env.team.slug}/{env.name}"
        items.append(_about(env, "approval", title=title, detail=detail, at=env.created_at))
    return items


@register
def my_environments_ending(actor: Actor) -> list[Item]:
    """The viewer's environments expiring (inside their warning window) or proposed idle."""
    now = timezone.now()
    envs = selectors.environment_list(
        viewer=actor, filters=selectors.EnvironmentFilter(requested_by=actor.username)
    ).filter(status__in=[Status.READY, Status.EXPIRING])[:100]
    items = []
    for env in envs:
        if env.status == Status.EXPIRING:
            title, detail = f"{env.name} has expired", "its TTL ran out; it is torn down next"
            items.append(
                _about(env, "expiring", "expiring", title=title, detail=detail, at=env.expires_at)
            )
            continue
        warn_at = selectors.expiry_warns_at(env)
        if warn_at and warn_at <= now:
            left = max(0, int((env.expires_at - now).total_seconds() // 60))
            title = f"{env.name} expires in {left // 60} h {left % 60} min"
            tag, at = env.expires_at.isoformat(), warn_at
            detail = "extend its TTL or let it go"
            items.append(_about(env, "expiring", tag, title=title, detail=detail, at=at))
        if env.idle_proposed_at:
            at = env.idle_proposed_at
            title = f"{env.name} looks idle"
            detail = "it is proposed for teardown: keep it if you still use it"
            items.append(_about(env, "idle", at.isoformat(), title=title, detail=detail, at=at))
    return items


@register
def my_teams_budgets(actor: Actor) -> list[Item]:
    """This month's budget thresholds crossed by the viewer's teams (the notices the budget
    keeper records once per threshold per month)."""
    if not actor.teams:
        return []
    items, seen = [], set()
    for notice in budget_reads.recent_budget_notices(teams=sorted(actor.teams), now=timezone.now()):
        if notice.team_id in seen:
            continue  # the team's highest threshold crossed says it all
        seen.add(notice.team_id)
        reached = notice.threshold >= REACHED
        items.append(
            Item(
                key=f"portal.budget:{notice.team.slug}:{notice.month:%Y-%m}:{notice.threshold}",
                kind="budget",
                title=f"{notice.team.slug} has reached its budget"
                if reached
                else f"{notice.team.slug} has spent {notice.threshold}% of its budget",
                detail=f"{notice.spend} of {notice.budget} spent in {notice.month:%B}, forecast "
                f"{notice.forecast}" + ("; new requests are refused" if reached else ""),
                url=reverse("portal:showback") + f"?team={notice.team.slug}",
                at=notice.created_at,
            )
        )
    return items
