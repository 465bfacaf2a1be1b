"""What an actor may see, per kind of object: the one rule, in NetBox's `restrict()` manner.

`scope(actor, kind)` turns an actor into what it may see of one kind of object (every row,
the rows of some teams, and whether rows no team owns); every selector narrows its queryset
with `restrict(...)`, and the `can_view_*` predicates of kiln.identity.permissions ask
`sees(...)`; both read the same `Scope`, so a list and a detail never disagree, for people
and for system actors alike. The rules are data (`RULES`), one row per kind:

- a team's members see its rows (whatever their role, where `members`);
- the roles in `every` see every team's rows, and approvers too under the central change
  board (`KILN_APPROVERS_GLOBAL`) where `change_board`;
- a system actor sees every row where its job (a capability in `components`) reads them,
  and nothing else;
- the roles in `unowned` see rows no team owns (shared capacity, the platform's pods);
- where `role_needed`, an actor without a Kiln role sees nothing at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import QuerySet

from kiln.identity import components as c
from kiln.identity.actors import APPROVER, AUDITOR, PLATFORM_ADMIN, ROLES, Actor

ENVIRONMENTS = "environments"  # environment requests and the environments they become
ROLLOUTS = "rollouts"  # rollouts and the services they ship
EXPERIMENTS = "experiments"  # chaos experiments, their leases and injections
NODES = "nodes"  # cluster nodes and their spot reclaims
PODS = "pods"  # cluster pods, by name
AUDIT = "audit"  # the audit chain, its checkpoints and proofs
TEAMS = "teams"  # the team directory and its memberships


@dataclass(frozen=True)
class Rule:
    """Who sees which rows of one kind of object (see the module docstring)."""

    every: frozenset[str]
    change_board: bool = False
    members: bool = True
    components: frozenset[str] = frozenset()
    unowned: frozenset[str] = frozenset()
    role_needed: bool = False


_EVERY_TEAM = frozenset({PLATFORM_ADMIN, AUDITOR})

RULES: dict[str, Rule] = {
    ENVIRONMENTS: Rule(
        every=_EVERY_TEAM,
        change_board=True,
        components=frozenset({c.ENV_POLICY, c.ENV_AUTO_APPROVE, c.ENV_PROVISION, c.ENV_TEARDOWN}),
    ),
    ROLLOUTS: Rule(
        every=_EVERY_TEAM,
        change_board=True,
        components=frozenset({c.ROLLOUT_ANALYZE, c.ROLLOUT_MANAGE}),
    ),
    EXPERIMENTS: Rule(
        every=_EVERY_TEAM, components=frozenset({c.CHAOS_RUN, c.CHAOS_CONTROL, c.CHAOS_REAP})
    ),
    # A node an environment's NodePool launched is that environment's; shared capacity is seen
    # by every Kiln role. Cluster reads are for people: no component asks.
    NODES: Rule(every=_EVERY_TEAM, change_board=True, unowned=frozenset(ROLES), role_needed=True),
    # A pod no team owns can carry another team's environment in its name (a tenant control
    # plane's `tcp-<namespace>-<name>`): platform admins only.
    PODS: Rule(
        every=_EVERY_TEAM,
        change_board=True,
        unowned=frozenset({PLATFORM_ADMIN}),
        role_needed=True,
    ),
    AUDIT: Rule(every=_EVERY_TEAM, members=False, components=frozenset({c.AUDIT_VERIFY})),
    TEAMS: Rule(every=frozenset({PLATFORM_ADMIN})),
}
KINDS = tuple(RULES)


@dataclass(frozen=True)
class Scope:
    """What of one kind an actor sees: every team's rows, or those of `teams`; and `unowned`,
    whether it sees rows no team owns."""

    every: bool = False
    teams: frozenset[str] = frozenset()
    unowned: bool = False

    def allows(self, team: str | None) -> bool:
        """True if a row of `team` is in scope (None: a row no team owns)."""
        if team is None:
            return self.unowned
        return self.every or team in self.teams

    def restrict(self, queryset: QuerySet, *, team_field: str) -> QuerySet:
        """`queryset` narrowed to the rows in scope (`team_field`: the path to the team's slug)."""
        if self.every:
            return queryset
        if not self.teams:
            return queryset.none()
        return queryset.filter(**{f"{team_field}__in": sorted(self.teams)})


NOTHING = Scope()


def approvers_act_for_every_team() -> bool:
    """The deployment's central change board (`KILN_APPROVERS_GLOBAL`): approvers act for every team."""
    return bool(getattr(settings, "KILN_APPROVERS_GLOBAL", False))


def scope(actor: Actor, kind: str) -> Scope:
    """What `actor` may see of `kind` (one of KINDS), by its row of RULES."""
    rule = RULES[kind]
    if actor.is_system:
        return Scope(every=bool(actor.capabilities & rule.components))
    if rule.role_needed and not actor.roles & frozenset(ROLES):
        return NOTHING
    change_board = rule.change_board and APPROVER in actor.roles and approvers_act_for_every_team()
    return Scope(
        every=bool(actor.roles & rule.every) or change_board,
        teams=actor.teams if rule.members else frozenset(),
        unowned=bool(actor.roles & rule.unowned),
    )


def sees(actor: Actor, kind: str, team: str | None) -> bool:
    """True if `actor` may see a row of `kind` owned by `team` (None: owned by no team)."""
    return scope(actor, kind).allows(team)


def restrict(queryset: QuerySet, actor: Actor, kind: str, *, team_field: str) -> QuerySet:
    """`queryset` of `kind` narrowed to the rows `actor` may see (`team_field`: the team slug's path)."""
    return scope(actor, kind).restrict(queryset, team_field=team_field)
