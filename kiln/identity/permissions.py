"""The one module that decides permissions.

DRF permission classes (`kiln.identity.drf`), HTML views, Django admin and
services all ask here. Roles come from the JWT `roles` claim for API clients
and from Django groups for session users; a superuser is a platform admin.

Background components act as system actors (`system_actor("reaper")`): no role,
no team, only the capabilities of their job (kiln.identity.components). Each
predicate below allows a system actor only where its docstring names the
capability; no system actor approves or administers.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from django.db.models import QuerySet

from kiln.identity import components as c
from kiln.identity import visibility as v

# Who acts, re-exported: callers ask this module for roles and actors as for permissions.
from kiln.identity.actors import APPROVER as APPROVER
from kiln.identity.actors import AUDITOR as AUDITOR
from kiln.identity.actors import ENGINEER as ENGINEER
from kiln.identity.actors import PLATFORM_ADMIN as PLATFORM_ADMIN
from kiln.identity.actors import ROLES as ROLES
from kiln.identity.actors import Actor as Actor
from kiln.identity.actors import has_capability as _has_capability
from kiln.identity.actors import system_actor as system_actor
from kiln.identity.models import Membership
from kiln.identity.visibility import approvers_act_for_every_team as approvers_act_for_every_team


def actor_for_user(user: Any, claims: dict[str, Any] | None = None) -> Actor:
    """Build the Actor for a Django user; `claims` (a verified JWT) override groups for roles."""
    if user is None or not getattr(user, "is_authenticated", False):
        return Actor(username="anonymous")
    teams: set[str] = set()
    if claims is not None:
        # The `team`/`teams` claims count once user_from_claims reconciled them into
        # memberships (the team exists); a claim naming no real team grants nothing.
        roles = {r for r in _as_list(claims.get("roles")) if r in ROLES}
    else:
        roles = {name for name in user.groups.values_list("name", flat=True) if name in ROLES}
        if user.is_superuser:
            roles.add(PLATFORM_ADMIN)
    teams.update(_membership_teams(user))
    return Actor(
        username=user.get_username(),
        roles=frozenset(roles),
        teams=frozenset(teams),
        user_id=user.pk,
    )


def actor_from_request(request: Any) -> Actor:
    """The Actor of an HTTP request (DRF or plain Django)."""
    cached = getattr(request, "_kiln_actor", None)
    if cached is not None:
        return cached
    auth = getattr(request, "auth", None)
    claims = auth if isinstance(auth, dict) else None
    actor = actor_for_user(getattr(request, "user", None), claims)
    try:
        request._kiln_actor = actor
    except AttributeError:  # pragma: no cover - immutable request wrappers
        pass
    return actor


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str)]
    return []


def _membership_teams(user: Any) -> Iterable[str]:
    cached = getattr(user, "_kiln_membership_teams", None)
    if cached is not None:  # reconciled with the token's claims moments ago, same request
        return cached
    return Membership.objects.filter(user=user).values_list("team__slug", flat=True)


# --- predicates ---------------------------------------------------------------


def has_any_role(actor: Actor) -> bool:
    """True if the actor holds a Kiln role at all; without one only `GET /api/v1/me/` answers."""
    return bool(actor.roles & frozenset(ROLES))


def has_role(actor: Actor, *roles: str) -> bool:
    """True if the actor holds any of `roles`; platform admins hold every role."""
    return PLATFORM_ADMIN in actor.roles or any(r in actor.roles for r in roles)


def is_member(actor: Actor, team_slug: str) -> bool:
    """True if the actor belongs to the team (platform admins belong everywhere)."""
    return PLATFORM_ADMIN in actor.roles or team_slug in actor.teams


def can_view_audit(actor: Actor) -> bool:
    """Auditors (and platform admins) read and export the audit chain; the verifier reads it
    (visibility.AUDIT)."""
    return v.scope(actor, v.AUDIT).every


def can_administer(actor: Actor) -> bool:
    """Platform admins run the platform: admin site, pricing, manual overrides."""
    return PLATFORM_ADMIN in actor.roles


def can_use_admin(actor: Actor, *, is_staff: bool) -> bool:
    """The Django admin: staff accounts that are platform admins or approvers."""
    return is_staff and (PLATFORM_ADMIN in actor.roles or APPROVER in actor.roles)


def can_see_all_teams(actor: Actor) -> bool:
    """Platform admins see every team in the directory; everyone else the teams they belong to
    (visibility.TEAMS)."""
    return v.scope(actor, v.TEAMS).every


# --- scope: for which teams an approver acts (what anyone sees: kiln.identity.visibility) ------


# On whose behalf an approver acts for a team (approval_basis), in the words the queue shows.
AS_MEMBER = "member"
AS_CHANGE_BOARD = "change-board"
AS_PLATFORM_ADMIN = "platform-admin"


def approval_basis(actor: Actor, team_slug: str) -> str | None:
    """Why the actor may approve and steer for `team_slug`: a member approver, the central
    change board (`KILN_APPROVERS_GLOBAL`) or a platform admin; None if they may not."""
    if actor.is_system or not has_role(actor, APPROVER):
        return None
    if APPROVER in actor.roles and team_slug in actor.teams:
        return AS_MEMBER
    if PLATFORM_ADMIN in actor.roles:
        return AS_PLATFORM_ADMIN
    return AS_CHANGE_BOARD if approvers_act_for_every_team() else None


def approver_teams_filter(queryset: QuerySet, actor: Actor, *, team_field: str) -> QuerySet:
    """`queryset` narrowed to rows of the teams the actor may approve for (none for non-approvers)."""
    if actor.is_system or not has_role(actor, APPROVER):
        return queryset.none()
    if PLATFORM_ADMIN in actor.roles or approvers_act_for_every_team():
        return queryset
    return queryset.filter(**{f"{team_field}__in": sorted(actor.teams)})


def can_manage_teams(actor: Actor) -> bool:
    """Creating teams and changing who belongs to them: platform admins, `teams.manage`."""
    return PLATFORM_ADMIN in actor.roles or _has_capability(actor, c.TEAMS_MANAGE)


def can_run_chaos(actor: Actor, team_slug: str) -> bool:
    """Chaos on a namespace: engineers of the team that owns it, platform admins, `chaos.run`."""
    if PLATFORM_ADMIN in actor.roles or _has_capability(actor, c.CHAOS_RUN):
        return True
    return ENGINEER in actor.roles and team_slug in actor.teams


def can_view_chaos(actor: Actor, team_slug: str) -> bool:
    """Chaos experiments: the owning team, auditors, platform admins and the chaos components
    (`chaos.run`, `chaos.control`, `chaos.reap`; visibility.EXPERIMENTS)."""
    return v.sees(actor, v.EXPERIMENTS, team_slug)


def can_control_chaos(actor: Actor) -> bool:
    """Hold an experiment's lease and inject its fault: the chaos controller (`chaos.control`)."""
    return _has_capability(actor, c.CHAOS_CONTROL)


def can_operate_chaos_lever(actor: Actor, team_slug: str | None) -> bool:
    """Engage or release a chaos safety lever: the platform's (`team_slug` None) platform admins
    only; a team's also that team's engineers. No system actor moves a lever."""
    if PLATFORM_ADMIN in actor.roles:
        return True
    return team_slug is not None and ENGINEER in actor.roles and team_slug in actor.teams


def can_revert_fault(actor: Actor, team_slug: str) -> bool:
    """Revert a fault and end its experiment: who may run it there, the controller and the reaper."""
    return (
        can_run_chaos(actor, team_slug)
        or _has_capability(actor, c.CHAOS_CONTROL)
        or _has_capability(actor, c.CHAOS_REAP)
    )


def can_request_environment(actor: Actor, team_slug: str) -> bool:
    """Engineers ask for environments for their own teams (platform admins for any)."""
    return PLATFORM_ADMIN in actor.roles or (ENGINEER in actor.roles and team_slug in actor.teams)


def can_act_on_environment(actor: Actor, team_slug: str) -> bool:
    """Engineers extend and tear down their team's environments (platform admins any)."""
    return can_request_environment(actor, team_slug)


def can_tear_down_environment(actor: Actor, team_slug: str) -> bool:
    """Tear an environment down: who may act on it, and the reaper (`environment.teardown`)."""
    return can_act_on_environment(actor, team_slug) or _has_capability(actor, c.ENV_TEARDOWN)


def can_sleep_environment(actor: Actor, team_slug: str) -> bool:
    """Put an environment to sleep or wake it: who may act on it (its team's engineers, platform
    admins) and the components whose job is it (`environment.sleep`: inactivity, schedules,
    kubectl requests, budgets)."""
    return can_act_on_environment(actor, team_slug) or _has_capability(actor, c.ENV_SLEEP)


def can_set_sleep_schedule(actor: Actor, team_slug: str) -> bool:
    """Set or remove a team's sleep schedule: its engineers and platform admins (no system actor)."""
    return not actor.is_system and can_act_on_environment(actor, team_slug)


def can_view_environment(actor: Actor, team_slug: str) -> bool:
    """The owning team (its approvers too), auditors, platform admins, approvers under
    `KILN_APPROVERS_GLOBAL` and the environment components (`environment.policy`,
    `environment.auto-approve`, `environment.provision`, `environment.teardown`;
    visibility.ENVIRONMENTS)."""
    return v.sees(actor, v.ENVIRONMENTS, team_slug)


def can_set_budget(actor: Actor) -> bool:
    """Set a team's monthly budget, or raise it for the month with a reason: platform admins
    only (no system actor)."""
    return PLATFORM_ADMIN in actor.roles and not actor.is_system


def can_view_node(actor: Actor, *, environment: str | None, team: str | None) -> bool:
    """A cluster node: any Kiln role sees shared capacity (a node no environment's NodePool
    launched); a node of an environment is seen by whoever may view that environment (its
    team, approvers, auditors, platform admins). `team` None: the owner is unknown, so only
    those who see every environment (visibility.NODES)."""
    return v.sees(actor, v.NODES, (team or "") if environment else None)


def can_view_pod(actor: Actor, *, team: str | None) -> bool:
    """A pod, by name: whoever may view its team's environments; a pod no team owns (the
    platform's namespaces, the management namespace that runs every tenant control plane as
    `tcp-<namespace>-<name>`) platform admins only, since its name can carry another team's
    environment. Who may not see a pod sees it counted, never named (visibility.PODS)."""
    return v.sees(actor, v.PODS, team)


def can_move_environment(actor: Actor, to: str, *, moves: Mapping[str, Collection[str]]) -> bool:
    """May this actor move an environment to state `to`?

    A system component only to the states of its job: `moves` maps a capability to the states
    it may move to (portal.lifecycle.JOB_MOVES, beside the table of legal moves). A person's
    move reaches the lifecycle through a service that has already asked the person's own
    predicate (can_approve, can_act_on_environment), so it passes here.
    """
    return _within_job(actor, to, moves)


def can_approve(
    actor: Actor, team_slug: str | None = None, requester_username: str | None = None
) -> bool:
    """Approvers approve requests of the teams they act for (approval_basis), never their own
    (separation of duties); never a system actor. Without `team_slug`: the approver role at all
    (who sees the approval queue)."""
    if not has_role(actor, APPROVER) or actor.is_system:
        return False
    if team_slug is not None and approval_basis(actor, team_slug) is None:
        return False
    return requester_username is None or actor.username != requester_username


def can_manage_rollout(actor: Actor, team_slug: str) -> bool:
    """Engineers of the owning team start, feed and abort its rollouts (platform admins any,
    `rollout.manage` for the demo seed and benchmarks)."""
    return (
        PLATFORM_ADMIN in actor.roles
        or (ENGINEER in actor.roles and team_slug in actor.teams)
        or _has_capability(actor, c.ROLLOUT_MANAGE)
    )


def can_analyze_rollout(actor: Actor) -> bool:
    """Step, promote or roll back a rollout on its metrics' evidence: the canary analyzer only."""
    return _has_capability(actor, c.ROLLOUT_ANALYZE)


def can_decide_rollout(
    actor: Actor, kind: str, *, decisions: Mapping[str, Collection[str]]
) -> bool:
    """May this actor record a rollout decision of `kind` (and shift its traffic)?

    A system component only the kinds of its job: `decisions` maps a capability to the kinds
    it may record (canary.services.machine.JOB_DECISIONS, beside the code that records them):
    the analyzer starts, steps, promotes, rolls back; nothing else moves traffic on its own. A
    person's decision reaches the record through a service that has already asked the person's
    own predicate (can_manage_rollout, can_promote_rollout), so it passes here.
    """
    return _within_job(actor, kind, decisions)


def _within_job(actor: Actor, step: str, jobs: Mapping[str, Collection[str]]) -> bool:
    """True for a person; for a system actor, if one of its jobs (capability: the steps it may
    take, as the owning app lists them) includes `step`."""
    if not actor.is_system:
        return True
    return any(step in steps for job, steps in jobs.items() if _has_capability(actor, job))


def can_promote_rollout(actor: Actor, team_slug: str) -> bool:
    """A manual promotion overrides the analysis: approvers who act for the owning team
    (approval_basis) and platform admins only (no system actor)."""
    return approval_basis(actor, team_slug) is not None


def can_view_rollout(actor: Actor, team_slug: str) -> bool:
    """The owning team (its approvers too), auditors, platform admins, approvers under
    `KILN_APPROVERS_GLOBAL` and the canary components (`rollout.analyze`, `rollout.manage`;
    visibility.ROLLOUTS)."""
    return v.sees(actor, v.ROLLOUTS, team_slug)


# --- the background components' own jobs ----------------------------------------------------


def can_record_audit(actor: Actor) -> bool:
    """Write audit events: every person (their own acts) and every component (`audit.record`)."""
    return not actor.is_system or _has_capability(actor, c.AUDIT_RECORD)


def can_append_chain(actor: Actor) -> bool:
    """Append to the hash chain and sign checkpoints: the audit writer alone (`audit.chain`)."""
    return _has_capability(actor, c.AUDIT_CHAIN)


def can_store_verification(actor: Actor) -> bool:
    """Store the outcome of a chain verification: the audit verifier alone (`audit.verify`)."""
    return _has_capability(actor, c.AUDIT_VERIFY)


def can_store_cosignature(actor: Actor) -> bool:
    """Store a witness's cosignature of a checkpoint: the witness intake alone (`audit.cosign`)."""
    return _has_capability(actor, c.AUDIT_COSIGN)


def can_set_up_audit(actor: Actor) -> bool:
    """Create the chain's database roles: platform admins and `audit.setup`."""
    return PLATFORM_ADMIN in actor.roles or _has_capability(actor, c.AUDIT_SETUP)


def can_provision_users(actor: Actor) -> bool:
    """Create users from token subjects and reconcile claim memberships: `users.provision`."""
    return _has_capability(actor, c.USERS_PROVISION)


def can_sync_nodes(actor: Actor) -> bool:
    """Make the node inventory match the cluster: platform admins and `nodes.sync`."""
    return PLATFORM_ADMIN in actor.roles or _has_capability(actor, c.NODES_SYNC)


def can_hold_disruption_freeze(actor: Actor) -> bool:
    """Freeze (and release) the nodes Kiln's own work runs on: the canary analyzer for a rollout
    under analysis, the chaos controller for an experiment under lease."""
    return _has_capability(actor, c.ROLLOUT_ANALYZE) or _has_capability(actor, c.CHAOS_CONTROL)


def can_reap_disruption_freezes(actor: Actor) -> bool:
    """Release freezes whose holder is gone or past their hard bound, and make the nodes match:
    platform admins, the node sync (`nodes.sync`) and the chaos reaper (`chaos.reap`)."""
    return (
        PLATFORM_ADMIN in actor.roles
        or _has_capability(actor, c.NODES_SYNC)
        or _has_capability(actor, c.CHAOS_REAP)
    )


def can_seed_pricing(actor: Actor) -> bool:
    """Load instance types and prices: platform admins and `pricing.seed`."""
    return PLATFORM_ADMIN in actor.roles or _has_capability(actor, c.PRICING_SEED)


def can_store_replay(actor: Actor) -> bool:
    """Store a trace replay's report: platform admins and `replay.store`."""
    return PLATFORM_ADMIN in actor.roles or _has_capability(actor, c.REPLAY_STORE)


def can_seed_demo(actor: Actor) -> bool:
    """Create the demo people, teams and data: platform admins and `demo.seed`."""
    return PLATFORM_ADMIN in actor.roles or _has_capability(actor, c.DEMO_SEED)
