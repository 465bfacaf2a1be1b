"""Identity writes: users seen for the first time in a token, teams and their members.

Every write is audited in the same transaction as the change it describes.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

import audit
from kiln.errors import Conflict, Forbidden, InvalidInput
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import Actor, can_manage_teams, system_actor
from kiln.validators import DNS_LABEL

MAX_USERNAME = 150


def user_from_claims(*, claims: dict[str, Any]) -> AbstractBaseUser:
    """Return the user for a verified token's `sub`, created on first sight, its claim memberships reconciled."""
    User = get_user_model()
    username = claims["sub"]
    if len(username) > MAX_USERNAME:  # the verifier refuses these; never truncate into another user
        raise InvalidInput(f"sub is longer than {MAX_USERNAME} characters")
    user = User.objects.filter(username=username).first()
    if user is None:
        try:
            with transaction.atomic():
                user = User.objects.create(username=username)
                user.set_unusable_password()
                user.save(update_fields=["password"])
                audit.record(
                    system_actor("identity"),
                    "kiln.user.created",
                    user,
                    {"sub": claims["sub"], "iss": claims.get("iss"), "via": "jwt"},
                )
        except IntegrityError:  # a concurrent first request created it
            user = User.objects.get(username=username)
    membership_reconcile(user=user, claimed=claimed_teams(claims))
    return user


MAX_CLAIMED_TEAMS = 100  # a token naming more teams than this is cut here, never looped over whole


def claimed_teams(claims: dict[str, Any]) -> frozenset[str]:
    """The team slugs a verified token names: its `team` string and its optional `teams` list."""
    slugs: set[str] = set()
    team = claims.get("team")
    if isinstance(team, str) and team:
        slugs.add(team)
    teams = claims.get("teams")
    if isinstance(teams, list | tuple):
        slugs.update(t for t in teams[:MAX_CLAIMED_TEAMS] if isinstance(t, str) and t)
    return frozenset(slugs)


def membership_reconcile(*, user: AbstractBaseUser, claimed: frozenset[str]) -> frozenset[str]:
    """Make `user`'s claim memberships exactly the existing teams in `claimed`; return all their teams.

    Admin-granted memberships are never touched. The common case, nothing changed,
    is one read and no write. A change locks the user row and re-reads before
    writing, so concurrent authentications with different claims are serialised:
    the last one wins and no insert collides with another. The result is cached
    on `user` for the Actor built from the same request.
    """
    current = dict(Membership.objects.filter(user=user).values_list("team__slug", "source"))
    stale = {slug for slug, source in current.items() if source == Membership.CLAIM} - claimed
    missing = claimed - current.keys()
    if missing:
        missing = set(Team.objects.filter(slug__in=missing).values_list("slug", flat=True))
    if stale or missing:
        current = _membership_reconcile_locked(user=user, claimed=claimed)
    teams = frozenset(current)
    user._kiln_membership_teams = teams
    return teams


def _membership_reconcile_locked(
    *, user: AbstractBaseUser, claimed: frozenset[str]
) -> dict[str, str]:
    actor = system_actor("identity")
    with transaction.atomic():
        _lock_user(user)
        rows = {m.team.slug: m for m in Membership.objects.filter(user=user).select_related("team")}
        for slug, membership in sorted(rows.items()):
            if membership.source == Membership.CLAIM and slug not in claimed:
                membership.delete()
                del rows[slug]
                _audit_membership(
                    actor=actor,
                    action="kiln.membership.deleted",
                    team=membership.team,
                    user=user,
                    via=CLAIM_VIA,
                )
        for team in Team.objects.filter(slug__in=claimed - rows.keys()).order_by("slug"):
            rows[team.slug] = Membership.objects.create(
                user=user, team=team, source=Membership.CLAIM
            )
            _audit_membership(
                actor=actor, action="kiln.membership.created", team=team, user=user, via=CLAIM_VIA
            )
    return {slug: m.source for slug, m in rows.items()}


def _lock_user(user: AbstractBaseUser) -> None:
    """Lock the user's row: one membership writer per user at a time (a no-op on SQLite,
    whose IMMEDIATE transactions already serialise writers)."""
    get_user_model().objects.select_for_update().only("pk").get(pk=user.pk)


CLAIM_VIA = "jwt"  # audit `via` of claim reconciliation; an admin's grant or removal says "admin"
ADMIN_VIA = "admin"


def _audit_membership(
    *, actor: Actor, action: str, team: Team, user: AbstractBaseUser, via: str
) -> None:
    audit.record(actor, action, team, {"user": user.get_username(), "team": team.slug, "via": via})


def team_create(*, actor: Actor, slug: str, name: str) -> Team:
    """Create a team whose slug is a DNS-1123 label; 400 on a bad slug, 409 if it exists."""
    _need_team_manager(actor)
    slug, name = slug.strip(), name.strip()
    try:
        DNS_LABEL(slug)
    except ValidationError as exc:
        raise InvalidInput(
            "The team slug is not a DNS-1123 label.", extra={"fields": {"slug": exc.messages}}
        ) from exc
    if not name:
        raise InvalidInput("The team needs a name.", extra={"fields": {"name": ["required"]}})
    if len(name) > Team._meta.get_field("name").max_length:
        raise InvalidInput("The team name is too long.", extra={"fields": {"name": ["too long"]}})
    try:
        with transaction.atomic():
            team = Team.objects.create(slug=slug, name=name)
            audit.record(actor, "kiln.team.created", team, {"slug": slug, "name": name})
    except IntegrityError as exc:
        raise Conflict(f"A team with slug {slug!r} already exists.") from exc
    return team


def _need_team_manager(actor: Actor) -> None:
    """Teams and memberships: platform admins and `teams.manage` (seed, benchmarks)."""
    if not can_manage_teams(actor):
        raise Forbidden(f"{actor} may not manage teams or their members")


def membership_add(*, actor: Actor, team: Team, username: str) -> Membership:
    """Grant `team` to an existing user (platform admins); 400 if unknown, 409 if already granted.

    A membership the user holds from a token claim becomes an admin grant (one row,
    the admin source wins), so it outlives the claim.
    """
    _need_team_manager(actor)
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise InvalidInput(
            f"No user named {username!r}.", extra={"fields": {"username": ["unknown user"]}}
        )
    with transaction.atomic():
        _lock_user(user)
        membership = Membership.objects.filter(user=user, team=team).first()
        if membership is not None and membership.source == Membership.ADMIN:
            raise Conflict(f"{username} is already a member of {team.slug}.")
        if membership is None:
            membership = Membership.objects.create(user=user, team=team, source=Membership.ADMIN)
            _audit_membership(
                actor=actor, action="kiln.membership.created", team=team, user=user, via=ADMIN_VIA
            )
        else:
            membership.source = Membership.ADMIN
            membership.save(update_fields=["source"])
            audit.record(
                actor,
                "kiln.membership.changed",
                team,
                {
                    "user": user.get_username(),
                    "team": team.slug,
                    "source": Membership.ADMIN,
                    "was": Membership.CLAIM,
                    "via": ADMIN_VIA,
                },
            )
    return membership


def membership_remove(*, actor: Actor, membership: Membership) -> None:
    """Remove a person from a team (a claim membership comes back if the next token names it)."""
    _need_team_manager(actor)
    team, user = membership.team, membership.user
    with transaction.atomic():
        _lock_user(user)
        deleted, _ = Membership.objects.filter(pk=membership.pk).delete()
        if deleted:  # not already gone with a token's claims a moment ago
            _audit_membership(
                actor=actor, action="kiln.membership.deleted", team=team, user=user, via=ADMIN_VIA
            )


def login_lockout_record(
    *,
    username: str,
    ip_address: str,
    scope: str,
    failures: int | None,
    limit: int,
    cooloff_minutes: float,
) -> None:
    """Audit that sign-in is now refused for a username from an address, or for an address.

    `kiln.login.locked_out`; `scope` is "account" (that username from that address) or
    "address" (every username from it).

    Recorded once per lockout, when the failure that reaches the limit is counted
    (`failures` is that count); a refusal during the cool-off (`failures` None, the
    lockout is already on record) records nothing, so hammering a locked login
    cannot flood the chain.
    """
    if failures is None:
        return
    username = (username or "")[:MAX_USERNAME]
    with transaction.atomic():
        audit.record(
            system_actor("identity"),
            "kiln.login.locked_out",
            f"kiln.login:{username}",
            {
                "username": username,
                "ip_address": ip_address,
                "scope": scope,
                "failures": failures,
                "limit": limit,
                "cooloff_minutes": cooloff_minutes,
            },
        )


def login_lockout_lift(*, username: str | None, ip_address: str | None, via: str) -> int:
    """Forget the counted sign-in failures that match, lifting their locks (`kiln.login.unlocked`).

    `username` and/or `ip_address` narrow it; neither lifts every lock. Returns how many
    counters were removed; removing none records nothing.
    """
    from axes.models import AccessAttempt  # axes' table: imported where it is written

    attempts = AccessAttempt.objects.all()
    if username:
        attempts = attempts.filter(username=username[:MAX_USERNAME])
    if ip_address:
        attempts = attempts.filter(ip_address=ip_address)
    with transaction.atomic():
        removed = [(a.username or "", a.ip_address or "") for a in attempts.select_for_update()]
        if not removed:
            return 0
        attempts.delete()
        audit.record(
            system_actor("identity"),
            "kiln.login.unlocked",
            f"kiln.login:{username or '*'}",
            {
                "username": username or None,
                "ip_address": ip_address or None,
                "counters": len(removed),
                "via": via,
            },
        )
    return len(removed)
