"""The portal's home-page panels: my environments with status and expiry, approvals waiting for
me, and this month's spend."""

from __future__ import annotations

from kiln.dashboard import Panel, register
from kiln.identity import visibility
from kiln.identity.permissions import ENGINEER, Actor, can_approve, has_role
from portal import selectors
from portal.lifecycle import LIVE, badge, label


@register
def my_environments(actor: Actor) -> Panel | None:
    """The viewer's live environments (engineers)."""
    if not has_role(actor, ENGINEER):
        return None
    envs = selectors.environment_list(
        viewer=actor, filters=selectors.EnvironmentFilter(requested_by=actor.username)
    ).filter(status__in=[s.value for s in LIVE])[:8]
    rows = [
        {"env": e, "badge": badge(e.status), "label": label(e.status, e.status_reason)}
        for e in envs
    ]
    return Panel("portal/_dashboard_environments.html", {"rows": rows}, order=10)


@register
def approvals_waiting(actor: Actor) -> Panel | None:
    """Requests this approver may still decide."""
    if not can_approve(actor):
        return None
    waiting = [
        env
        for env in selectors.approval_queue(viewer=actor)
        if env.request.requested_by.get_username() != actor.username
        and not any(d.approver_name == actor.username for d in env.decisions.all())
    ]
    return Panel(
        "portal/_dashboard_approvals.html",
        {"waiting": waiting[:8], "count": len(waiting)},
        order=20,
    )


@register
def spend_this_month(actor: Actor) -> Panel | None:
    """What the viewer's teams spent since the first of the month."""
    if not actor.teams and not has_role(actor, ENGINEER):
        return None
    return Panel(
        "portal/_dashboard_spend.html",
        {
            "spend": selectors.spend_this_month(viewer=actor),
            "every_team": visibility.scope(actor, visibility.ENVIRONMENTS).every,
        },
        order=40,
    )
